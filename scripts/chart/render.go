// render - renders a Helm chart the way `helm template` does, without helm.
//
// The template engine is the one helm uses: Go's text/template with the sprig function
// library (github.com/Masterminds/sprig), missingkey=zero, and helm's own functions
// (include, tpl, required, fail, toYaml, fromYaml, toJson, fromJson, lookup) added in
// funcs.go with helm's semantics. This file does what helm does around the engine:
// reads Chart.yaml and the values (values.yaml, then each -f file merged over the
// previous ones, then coalesced with the defaults), builds .Values .Release .Chart
// .Capabilities .Template, checks the chart's kubeVersion, renders every file under
// templates/ except partials (_*) and NOTES.txt (rendered apart), splits the output into
// YAML documents, reads each document's head as helm does (apiVersion, kind, name,
// annotations) and prints them like `helm template`: resources in helm's install order,
// then hooks, each after "---" and a "# Source:" line.
//
// Build (Debian 12: golang-go, golang-github-masterminds-sprig-dev,
// golang-gopkg-yaml.v3-dev):
//
//	GO111MODULE=off GOPATH=/usr/share/gocode go build -o build/chart-check/render ./scripts/chart
//
// Use:
//
//	render [-f values.yaml]... [--name NAME] [--namespace NS] [--kube-version V]
//	       [--api-versions G/V]... [--is-upgrade] [--values-out FILE] [--values-only]
//	       [--notes-out FILE] [--debug] CHART_DIR
//
// --values-out writes the final .Values as JSON (what values.schema.json is checked
// against; helm checks it before rendering, so --values-only stops there).
//
// The chart's files are loaded as helm loads them (files.go): .helmignore applies, and
// the files outside templates/ are .Files (Get, GetBytes, Lines, AsConfig, AsSecrets).
//
// Not done (not used by this project's chart): subcharts and dependencies, .Files.Glob,
// --set flags, toToml/fromToml, helm 4's duration functions, .Capabilities.HelmVersion,
// lookup against a cluster.
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"text/template"

	"github.com/Masterminds/semver"
	"gopkg.in/yaml.v3"
)

// Metadata is Chart.yaml; templates see its fields under their Go names
// (.Chart.Name, .Chart.AppVersion, .Chart.APIVersion ...), as in helm.
type Metadata struct {
	Name         string            `yaml:"name"`
	Home         string            `yaml:"home"`
	Sources      []string          `yaml:"sources"`
	Version      string            `yaml:"version"`
	Description  string            `yaml:"description"`
	Keywords     []string          `yaml:"keywords"`
	Maintainers  []Maintainer      `yaml:"maintainers"`
	Icon         string            `yaml:"icon"`
	APIVersion   string            `yaml:"apiVersion"`
	Condition    string            `yaml:"condition"`
	Tags         string            `yaml:"tags"`
	AppVersion   string            `yaml:"appVersion"`
	Deprecated   bool              `yaml:"deprecated"`
	Annotations  map[string]string `yaml:"annotations"`
	KubeVersion  string            `yaml:"kubeVersion"`
	Dependencies []interface{}     `yaml:"dependencies"`
	Type         string            `yaml:"type"`
}

type Maintainer struct {
	Name  string `yaml:"name"`
	Email string `yaml:"email"`
	URL   string `yaml:"url"`
}

func (m *Metadata) asMap() map[string]interface{} {
	maint := []interface{}{}
	for _, x := range m.Maintainers {
		maint = append(maint, map[string]interface{}{"Name": x.Name, "Email": x.Email, "URL": x.URL})
	}
	return map[string]interface{}{
		"Name": m.Name, "Home": m.Home, "Sources": m.Sources, "Version": m.Version,
		"Description": m.Description, "Keywords": m.Keywords, "Maintainers": maint,
		"Icon": m.Icon, "APIVersion": m.APIVersion, "Condition": m.Condition, "Tags": m.Tags,
		"AppVersion": m.AppVersion, "Deprecated": m.Deprecated, "Annotations": m.Annotations,
		"KubeVersion": m.KubeVersion, "Dependencies": m.Dependencies, "Type": m.Type,
		"IsRoot": true,
	}
}

// KubeVersion and VersionSet give .Capabilities.KubeVersion.{Version,Major,Minor} and
// .Capabilities.APIVersions.Has "group/version".
type KubeVersion struct {
	Version string
	Major   string
	Minor   string
}

func (k KubeVersion) String() string     { return k.Version }
func (k KubeVersion) GitVersion() string { return k.Version }

type VersionSet []string

func (v VersionSet) Has(apiVersion string) bool {
	for _, x := range v {
		if x == apiVersion {
			return true
		}
	}
	return false
}

type Capabilities struct {
	KubeVersion KubeVersion
	APIVersions VersionSet
}

// The built-in API group versions a cluster of the default version serves (plus CRD
// support); CRD groups such as monitoring.coreos.com/v1 come from --api-versions.
var builtinAPIVersions = []string{
	"v1", "admissionregistration.k8s.io/v1", "apiextensions.k8s.io/v1",
	"apiregistration.k8s.io/v1", "apps/v1", "authentication.k8s.io/v1",
	"authorization.k8s.io/v1", "autoscaling/v1", "autoscaling/v2", "batch/v1",
	"certificates.k8s.io/v1", "coordination.k8s.io/v1", "discovery.k8s.io/v1",
	"events.k8s.io/v1", "flowcontrol.apiserver.k8s.io/v1", "networking.k8s.io/v1",
	"node.k8s.io/v1", "policy/v1", "rbac.authorization.k8s.io/v1", "scheduling.k8s.io/v1",
	"storage.k8s.io/v1",
}

// helm's install order by kind; other kinds follow, by name.
var installOrder = []string{
	"PriorityClass", "Namespace", "NetworkPolicy", "ResourceQuota", "LimitRange",
	"PodSecurityPolicy", "PodDisruptionBudget", "ServiceAccount", "Secret", "SecretList",
	"ConfigMap", "StorageClass", "PersistentVolume", "PersistentVolumeClaim",
	"CustomResourceDefinition", "ClusterRole", "ClusterRoleList", "ClusterRoleBinding",
	"ClusterRoleBindingList", "Role", "RoleList", "RoleBinding", "RoleBindingList", "Service",
	"DaemonSet", "Pod", "ReplicationController", "ReplicaSet", "Deployment",
	"HorizontalPodAutoscaler", "StatefulSet", "Job", "CronJob", "IngressClass", "Ingress",
	"APIService", "MutatingWebhookConfiguration", "ValidatingWebhookConfiguration",
}

var hookEvents = map[string]bool{
	"pre-install": true, "post-install": true, "pre-delete": true, "post-delete": true,
	"pre-upgrade": true, "post-upgrade": true, "pre-rollback": true, "post-rollback": true,
	"test": true, "test-success": true,
}

type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(s string) error { *l = append(*l, s); return nil }

type options struct {
	chartDir, name, namespace, kubeVersion string
	valueFiles, apiVersions                listFlag
	isUpgrade, valuesOnly, debug           bool
	revision                               int
	valuesOut, notesOut                    string
}

func main() {
	var o options
	fl := flag.NewFlagSet("render", flag.ContinueOnError)
	fl.Var(&o.valueFiles, "f", "values file (repeatable; later files win)")
	fl.Var(&o.valueFiles, "values", "same as -f")
	fl.StringVar(&o.name, "name", "release-name", "release name")
	fl.StringVar(&o.namespace, "namespace", "default", "release namespace")
	fl.StringVar(&o.kubeVersion, "kube-version", "v1.33.0", "Kubernetes version for .Capabilities")
	fl.Var(&o.apiVersions, "api-versions", "extra API versions for .Capabilities.APIVersions (repeatable, comma-separated)")
	fl.BoolVar(&o.isUpgrade, "is-upgrade", false, "render as an upgrade (.Release.IsUpgrade)")
	fl.IntVar(&o.revision, "revision", 1, ".Release.Revision")
	fl.StringVar(&o.valuesOut, "values-out", "", "write the final values as JSON to this file")
	fl.BoolVar(&o.valuesOnly, "values-only", false, "stop after writing --values-out")
	fl.StringVar(&o.notesOut, "notes-out", "", "write the rendered NOTES.txt to this file")
	fl.BoolVar(&o.debug, "debug", false, "on a YAML error, print the rendered document with line numbers")
	if err := fl.Parse(os.Args[1:]); err != nil {
		os.Exit(2)
	}
	if fl.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: render [flags] CHART_DIR")
		os.Exit(2)
	}
	o.chartDir = fl.Arg(0)
	out, err := run(&o)
	if err != nil {
		fmt.Fprintf(os.Stderr, "Error: %v\n", err)
		os.Exit(1)
	}
	os.Stdout.WriteString(out)
}

func run(o *options) (string, error) {
	meta, err := loadChart(o.chartDir)
	if err != nil {
		return "", err
	}
	defaultsText, err := os.ReadFile(filepath.Join(o.chartDir, "values.yaml"))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return "", err
	}
	defaults, err := loadValuesFile(defaultsText)
	if err != nil {
		return "", fmt.Errorf("cannot load values.yaml: %w", err)
	}
	user := map[string]interface{}{}
	for _, f := range o.valueFiles {
		text, err := os.ReadFile(f)
		if err != nil {
			return "", err
		}
		m, err := loadValuesFile(text)
		if err != nil {
			return "", fmt.Errorf("failed to parse %s: %w", f, err)
		}
		user = mergeMaps(user, m)
	}
	vals := coalesceValues(user, defaults, func(w string) { fmt.Fprintln(os.Stderr, "warning: "+w) })
	if o.valuesOut != "" {
		j, err := json.MarshalIndent(vals, "", "  ")
		if err != nil {
			return "", err
		}
		if err := os.WriteFile(o.valuesOut, append(j, '\n'), 0o644); err != nil {
			return "", err
		}
	}
	if o.valuesOnly {
		return "", nil
	}

	caps, err := capabilities(o)
	if err != nil {
		return "", err
	}
	if meta.KubeVersion != "" {
		c, err := semver.NewConstraint(meta.KubeVersion)
		if err != nil {
			return "", fmt.Errorf("Chart.yaml kubeVersion %q: %w", meta.KubeVersion, err)
		}
		v, err := semver.NewVersion(caps.KubeVersion.Version)
		if err != nil {
			return "", err
		}
		if !c.Check(v) {
			return "", fmt.Errorf("chart requires kubeVersion: %s which is incompatible with Kubernetes %s",
				meta.KubeVersion, caps.KubeVersion.Version)
		}
	}

	loaded, err := loadChartFiles(o.chartDir)
	if err != nil {
		return "", err
	}
	top := map[string]interface{}{
		"Values":       vals,
		"Files":        loaded.files,
		"Chart":        meta.asMap(),
		"Capabilities": caps,
		"Release": map[string]interface{}{
			"Name": o.name, "Namespace": o.namespace, "IsUpgrade": o.isUpgrade,
			"IsInstall": !o.isUpgrade, "Revision": o.revision, "Service": "Helm",
		},
		"Subcharts": map[string]interface{}{},
	}
	files, err := renderTemplates(loaded.templates, meta.Name, top)
	if err != nil {
		return "", err
	}

	notesName := path.Join(meta.Name, "templates", "NOTES.txt")
	if notes, ok := files[notesName]; ok {
		if o.notesOut != "" {
			if err := os.WriteFile(o.notesOut, []byte(notes), 0o644); err != nil {
				return "", err
			}
		}
	}
	for name := range files {
		if strings.HasSuffix(name, "NOTES.txt") {
			delete(files, name)
		}
	}
	return printManifests(files, o.debug)
}

func loadChart(dir string) (*Metadata, error) {
	text, err := os.ReadFile(filepath.Join(dir, "Chart.yaml"))
	if err != nil {
		return nil, fmt.Errorf("not a chart: %w", err)
	}
	var m Metadata
	if err := yaml.Unmarshal(text, &m); err != nil {
		return nil, fmt.Errorf("Chart.yaml: %w", err)
	}
	switch {
	case m.APIVersion == "":
		return nil, errors.New("Chart.yaml: apiVersion is required")
	case m.APIVersion != "v1" && m.APIVersion != "v2":
		return nil, fmt.Errorf("Chart.yaml: apiVersion %q is not v1 or v2", m.APIVersion)
	case m.Name == "":
		return nil, errors.New("Chart.yaml: name is required")
	case m.Version == "":
		return nil, errors.New("Chart.yaml: version is required")
	case m.Type == "library":
		return nil, errors.New("library charts are not installable")
	case len(m.Dependencies) > 0:
		return nil, errors.New("charts with dependencies are not supported by this renderer")
	}
	if _, err := semver.StrictNewVersion(m.Version); err != nil {
		return nil, fmt.Errorf("Chart.yaml: version %q is not a semantic version", m.Version)
	}
	return &m, nil
}

func capabilities(o *options) (*Capabilities, error) {
	v, err := semver.NewVersion(o.kubeVersion)
	if err != nil {
		return nil, fmt.Errorf("--kube-version %q: %w", o.kubeVersion, err)
	}
	apis := append(VersionSet{}, builtinAPIVersions...)
	for _, a := range o.apiVersions {
		for _, x := range strings.Split(a, ",") {
			if x = strings.TrimSpace(x); x != "" {
				apis = append(apis, x)
			}
		}
	}
	return &Capabilities{
		KubeVersion: KubeVersion{
			Version: "v" + v.String(),
			Major:   strconv.FormatUint(v.Major(), 10),
			Minor:   strconv.FormatUint(v.Minor(), 10),
		},
		APIVersions: apis,
	}, nil
}

// renderTemplates parses every file under templates/ (as loadChartFiles found them) into
// one template set (each named CHART/templates/PATH, so that include can name any file)
// and executes all but the partials, each with .Template set to its name.
func renderTemplates(templates map[string]string, chartName string, top map[string]interface{}) (map[string]string, error) {
	sources := map[string]string{}
	for rel, text := range templates {
		sources[path.Join(chartName, rel)] = text
	}

	// Shallower paths first, then by name, as helm orders them.
	names := make([]string, 0, len(sources))
	for n := range sources {
		names = append(names, n)
	}
	sort.Slice(names, func(i, j int) bool {
		ci, cj := strings.Count(names[i], "/"), strings.Count(names[j], "/")
		if ci != cj {
			return ci < cj
		}
		return names[i] < names[j]
	})

	t := template.New("gotpl")
	t.Option("missingkey=zero")
	t.Funcs(baseFuncs())
	bindFuncs(t, map[string]int{})
	for _, n := range names {
		if _, err := t.New(n).Parse(sources[n]); err != nil {
			return nil, parseError(n, err)
		}
	}

	basePath := path.Join(chartName, "templates")
	out := map[string]string{}
	for _, n := range names {
		if strings.HasPrefix(path.Base(n), "_") {
			continue
		}
		top["Template"] = map[string]interface{}{"Name": n, "BasePath": basePath}
		var buf strings.Builder
		if err := t.ExecuteTemplate(&buf, n, top); err != nil {
			return nil, execError(n, err)
		}
		out[n] = strings.ReplaceAll(buf.String(), "<no value>", "")
	}
	return out, nil
}

func parseError(name string, err error) error {
	parts := strings.Split(err.Error(), ": ")
	if len(parts) < 3 {
		return fmt.Errorf("parse error in (%s): %w", name, err)
	}
	return fmt.Errorf("parse error at (%s): %s", parts[1], parts[len(parts)-1])
}

var wrapped = regexp.MustCompile(errStart + `((?s).*)` + errEnd)

// execError reports a `required` or `fail` message with the place of the call
// ("execution error at (ctxguard/templates/x.yaml:3:4): message"), other errors as
// text/template gives them.
func execError(name string, err error) error {
	msg := err.Error()
	parts := strings.SplitN(msg, ": ", 3)
	if m := wrapped.FindStringSubmatch(msg); m != nil {
		where := name
		if len(parts) == 3 {
			where = parts[1]
		}
		return fmt.Errorf("execution error at (%s): %s", where, m[1])
	}
	return fmt.Errorf("execution error in (%s): %w", name, err)
}

// manifest is one YAML document of the output.
type manifest struct {
	source, content, kind string
	hook                  bool
	index                 int
}

var docSeparator = regexp.MustCompile(`(?m)^---[ \t]*`)

func printManifests(files map[string]string, debug bool) (string, error) {
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	var resources, hooks []manifest
	for _, n := range names {
		text := files[n]
		if strings.HasPrefix(path.Base(n), "_") || strings.TrimSpace(text) == "" {
			continue
		}
		for _, doc := range docSeparator.Split(strings.TrimLeft(text, " \t\r\n"), -1) {
			if strings.TrimSpace(doc) == "" {
				continue
			}
			doc = strings.TrimLeft(doc, " \t\r\n")
			head, err := readHead(doc)
			if err != nil {
				if debug {
					for i, line := range strings.Split(doc, "\n") {
						fmt.Fprintf(os.Stderr, "%4d  %s\n", i+1, line)
					}
				}
				return "", fmt.Errorf("YAML parse error on %s: %w", n, err)
			}
			m := manifest{source: n, content: doc, kind: head.kind, index: len(resources) + len(hooks)}
			if events, ok := head.annotations["helm.sh/hook"]; ok {
				known := true
				for _, e := range strings.Split(events, ",") {
					if !hookEvents[strings.ToLower(strings.TrimSpace(e))] {
						known = false
					}
				}
				if !known {
					// helm drops a document whose hook events it does not know.
					fmt.Fprintf(os.Stderr, "warning: %s: skipping unknown hooks %q\n", n, events)
					continue
				}
				m.hook = true
				hooks = append(hooks, m)
			} else {
				resources = append(resources, m)
			}
		}
	}
	var b strings.Builder
	for _, group := range [][]manifest{sortByKind(resources), sortByKind(hooks)} {
		for _, m := range group {
			fmt.Fprintf(&b, "---\n# Source: %s\n%s\n", m.source, m.content)
		}
	}
	return b.String(), nil
}

type head struct {
	kind        string
	annotations map[string]string
}

// readHead reads what helm reads of each document before sending it anywhere:
// apiVersion, kind, metadata.name and metadata.annotations (a map of strings).
func readHead(doc string) (*head, error) {
	v, err := yamlToHelm([]byte(doc))
	if err != nil {
		return nil, err
	}
	h := &head{annotations: map[string]string{}}
	m, ok := v.(map[string]interface{})
	if !ok {
		if v == nil {
			return h, nil
		}
		return nil, fmt.Errorf("a manifest must be a mapping, not %T", v)
	}
	for _, k := range []string{"apiVersion", "kind"} {
		if x, ok := m[k]; ok && x != nil {
			if _, isString := x.(string); !isString {
				return nil, fmt.Errorf("%s must be a string", k)
			}
		}
	}
	h.kind, _ = m["kind"].(string)
	if md, ok := m["metadata"].(map[string]interface{}); ok {
		if name, ok := md["name"]; ok && name != nil {
			if _, isString := name.(string); !isString {
				return nil, errors.New("metadata.name must be a string")
			}
		}
		if ann, ok := md["annotations"].(map[string]interface{}); ok {
			for k, x := range ann {
				s, isString := x.(string)
				if !isString && x != nil {
					return nil, fmt.Errorf("metadata.annotations.%s must be a string, not %v", k, x)
				}
				h.annotations[k] = s
			}
		}
	}
	return h, nil
}

func sortByKind(ms []manifest) []manifest {
	rank := map[string]int{}
	for i, k := range installOrder {
		rank[k] = i
	}
	out := append([]manifest{}, ms...)
	sort.SliceStable(out, func(i, j int) bool {
		ri, iKnown := rank[out[i].kind]
		rj, jKnown := rank[out[j].kind]
		switch {
		case iKnown && jKnown:
			return ri < rj
		case iKnown != jKnown:
			return iKnown
		default:
			return out[i].kind < out[j].kind
		}
	})
	return out
}
