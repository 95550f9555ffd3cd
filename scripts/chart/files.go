// files.go - the chart's files as helm loads them: .helmignore, templates/ apart from the
// rest, and .Files (helm's engine/files.go) for the files that are neither templates nor
// the chart's own metadata.
//
// helm reads every file under the chart directory that .helmignore (plus its default rule
// "templates/.?*") does not exclude, sorts them by name in the loader (pkg/chart/loader):
// Chart.yaml, Chart.lock, values.yaml, values.schema.json, requirements.yaml and
// requirements.lock are the chart's metadata, templates/... are templates, charts/... are
// subcharts, and everything else becomes .Files, keyed by its slash-separated path
// relative to the chart ("rules/alerts.yml"). A UTF-8 byte order mark is dropped.
package main

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
)

// chartFiles is what the loader splits a chart directory into (metadata files are left
// out: run reads Chart.yaml and values.yaml itself).
type chartFiles struct {
	templates map[string]string // "templates/x.yaml" -> text
	files     Files             // everything else
}

var utf8BOM = []byte("\xEF\xBB\xBF")

// loadChartFiles walks dir as helm's directory loader does.
func loadChartFiles(dir string) (*chartFiles, error) {
	rules, err := loadHelmignore(dir)
	if err != nil {
		return nil, err
	}
	out := &chartFiles{templates: map[string]string{}, files: Files{}}
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		if rel == "." {
			return nil
		}
		n := filepath.ToSlash(rel)
		if d.IsDir() {
			if rules.ignore(n, true) {
				return filepath.SkipDir
			}
			return nil
		}
		if rules.ignore(n, false) {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		if !info.Mode().IsRegular() {
			return fmt.Errorf("cannot load irregular file %s as it has file mode type bits set", p)
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		data = bytes.TrimPrefix(data, utf8BOM)
		switch {
		case n == "Chart.yaml" || n == "Chart.lock" || n == "values.yaml" ||
			n == "values.schema.json" || n == "requirements.yaml" || n == "requirements.lock":
		case strings.HasPrefix(n, "templates/"):
			out.templates[n] = string(data)
		case strings.HasPrefix(n, "charts/"):
			return errors.New("charts with subcharts are not supported by this renderer")
		default:
			out.files[n] = data
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// ignoreRule is one line of .helmignore (helm's pkg/ignore).
type ignoreRule struct {
	pattern string
	negate  bool
	mustDir bool
	anchor  int // 0: base name only; 1: the whole relative path
}

type ignoreRules []ignoreRule

// loadHelmignore reads dir/.helmignore (none: no rules) and adds helm's default rule.
func loadHelmignore(dir string) (ignoreRules, error) {
	var rules ignoreRules
	text, err := os.ReadFile(filepath.Join(dir, ".helmignore"))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	lines := strings.Split(string(text), "\n")
	lines = append(lines, "templates/.?*")
	for _, line := range lines {
		r, ok, err := parseIgnoreRule(line)
		if err != nil {
			return nil, fmt.Errorf(".helmignore: %q: %w", line, err)
		}
		if ok {
			rules = append(rules, r)
		}
	}
	return rules, nil
}

func parseIgnoreRule(line string) (ignoreRule, bool, error) {
	rule := strings.TrimSpace(line)
	if rule == "" || strings.HasPrefix(rule, "#") {
		return ignoreRule{}, false, nil
	}
	if strings.Contains(rule, "**") {
		return ignoreRule{}, false, errors.New("double-star (**) syntax is not supported")
	}
	if _, err := filepath.Match(rule, "abc"); err != nil {
		return ignoreRule{}, false, err
	}
	r := ignoreRule{}
	if strings.HasPrefix(rule, "!") {
		r.negate = true
		rule = rule[1:]
	}
	if strings.HasSuffix(rule, "/") {
		r.mustDir = true
		rule = strings.TrimSuffix(rule, "/")
	}
	if strings.HasPrefix(rule, "/") {
		rule = strings.TrimPrefix(rule, "/")
		r.anchor = 1
	} else if strings.Contains(rule, "/") {
		r.anchor = 1
	}
	r.pattern = rule
	return r, true, nil
}

func (r ignoreRule) match(name string) bool {
	if r.anchor == 0 {
		name = path.Base(name)
	}
	ok, err := filepath.Match(r.pattern, name)
	return err == nil && ok
}

// ignore is helm's Rules.Ignore: the first rule that decides wins; a negated rule
// ignores what it does not match.
func (rules ignoreRules) ignore(name string, isDir bool) bool {
	if name == "" || name == "." || name == "./" {
		return false
	}
	for _, r := range rules {
		if r.negate {
			if r.mustDir && !isDir {
				return true
			}
			if !r.match(name) {
				return true
			}
			continue
		}
		if r.mustDir && !isDir {
			continue
		}
		if r.match(name) {
			return true
		}
	}
	return false
}

// Files is .Files: the chart's non-template files by relative path, with helm's
// methods. Not done: Glob (helm matches with github.com/gobwas/glob, not packaged for
// Debian 12; no template of this chart needs it).
type Files map[string][]byte

// GetBytes is the file's content, or empty when the chart has no such file.
func (f Files) GetBytes(name string) []byte {
	if v, ok := f[name]; ok {
		return v
	}
	return []byte{}
}

// Get is the file's content as a string, or "" when the chart has no such file.
func (f Files) Get(name string) string {
	return string(f.GetBytes(name))
}

// Lines splits the file into lines (one trailing newline dropped); none for no file, and
// none for an empty one (where helm's own Lines fails on an index out of range).
func (f Files) Lines(name string) []string {
	if f == nil || len(f[name]) == 0 {
		return []string{}
	}
	s := string(f[name])
	if s[len(s)-1] == '\n' {
		s = s[:len(s)-1]
	}
	return strings.Split(s, "\n")
}

// AsConfig is the files as a ConfigMap's data: base name -> content, as YAML.
func (f Files) AsConfig() string {
	if f == nil {
		return ""
	}
	m := map[string]string{}
	for k, v := range f {
		m[path.Base(k)] = string(v)
	}
	return toYAML(m)
}

// AsSecrets is the files as a Secret's data: base name -> base64 of the content, as YAML.
func (f Files) AsSecrets() string {
	if f == nil {
		return ""
	}
	m := map[string]string{}
	for k, v := range f {
		m[path.Base(k)] = base64.StdEncoding.EncodeToString(v)
	}
	return toYAML(m)
}
