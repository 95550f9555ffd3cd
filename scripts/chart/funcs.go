// funcs.go - the template functions helm adds to sprig's, with helm's semantics.
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"text/template"

	"github.com/Masterminds/sprig"
	"gopkg.in/yaml.v3"
)

// Messages of `required` and `fail` are wrapped so that the error report can show
// them alone, without text/template's call chain.
const errStart, errEnd = "CHART_ERR_START", "CHART_ERR_END"

// includeLimit: how deep one named template may include itself.
const includeLimit = 1000

// baseFuncs is sprig's text function map without env and expandenv (a chart must not
// read the environment of whoever renders it), plus helm's conversion functions and
// placeholders for the functions bound to a template set in bindFuncs.
func baseFuncs() template.FuncMap {
	f := sprig.TxtFuncMap()
	delete(f, "env")
	delete(f, "expandenv")
	extra := template.FuncMap{
		"toYaml":        toYAML,
		"mustToYaml":    mustToYAML,
		"toYamlPretty":  toYAMLPretty,
		"fromYaml":      fromYAML,
		"fromYamlArray": fromYAMLArray,
		"toJson":        toJSON,
		"mustToJson":    mustToJSON,
		"fromJson":      fromJSON,
		"fromJsonArray": fromJSONArray,
		// Without a cluster, as in `helm template`: every lookup finds nothing.
		"lookup": func(apiVersion, kind, namespace, name string) (map[string]interface{}, error) {
			return map[string]interface{}{}, nil
		},
		// No DNS while rendering.
		"getHostByName": func(string) string { return "" },
		"required": func(msg string, v interface{}) (interface{}, error) {
			if v == nil {
				return v, errors.New(errStart + msg + errEnd)
			}
			if s, ok := v.(string); ok && s == "" {
				return v, errors.New(errStart + msg + errEnd)
			}
			return v, nil
		},
		"fail": func(msg string) (string, error) {
			return "", errors.New(errStart + msg + errEnd)
		},
		"include": func(string, interface{}) (string, error) { return "", errors.New("include is not bound") },
		"tpl":     func(string, interface{}) (string, error) { return "", errors.New("tpl is not bound") },
	}
	for k, v := range extra {
		f[k] = v
	}
	return f
}

// bindFuncs gives t its include and tpl, which need the template set they run in.
func bindFuncs(t *template.Template, depth map[string]int) {
	t.Funcs(template.FuncMap{
		"include": includeFunc(t, depth),
		"tpl":     tplFunc(t, depth),
	})
}

// include runs a named template (a `define`) with the given data and returns its text,
// so that it can be piped (| nindent 4), unlike the `template` action.
func includeFunc(t *template.Template, depth map[string]int) func(string, interface{}) (string, error) {
	return func(name string, data interface{}) (string, error) {
		if depth[name] > includeLimit {
			return "", fmt.Errorf("rendering template has a nested reference name: %s: unable to execute template", name)
		}
		depth[name]++
		defer func() { depth[name]-- }()
		var buf strings.Builder
		err := t.ExecuteTemplate(&buf, name, data)
		return buf.String(), err
	}
}

// tpl renders a string as a template with the given data. It sees every template of
// the chart (a copy of the set, so a `define` inside the string stays local), with the
// same missingkey option, and its own include and tpl bound to that copy.
func tplFunc(parent *template.Template, depth map[string]int) func(string, interface{}) (string, error) {
	return func(text string, data interface{}) (string, error) {
		t, err := parent.Clone()
		if err != nil {
			return "", fmt.Errorf("cannot clone template: %w", err)
		}
		t.Option("missingkey=zero")
		bindFuncs(t, depth)
		t, err = t.New(parent.Name()).Parse(text)
		if err != nil {
			return "", fmt.Errorf("cannot parse template %q: %w", text, err)
		}
		var buf strings.Builder
		if err := t.Execute(&buf, data); err != nil {
			return "", fmt.Errorf("error during tpl function execution for %q: %w", text, err)
		}
		return strings.ReplaceAll(buf.String(), "<no value>", ""), nil
	}
}

// toYAML prints v as YAML the way helm's toYaml does: through JSON (so JSON field
// names and number forms: 8388608 stays 8388608), keys sorted, no trailing newline,
// and an empty string when v cannot be marshalled. Sequences are indented under their
// key (yaml.v3's style; helm's yaml.v2 writes them at the key's column: same data).
func toYAML(v interface{}) string {
	s, err := marshalYAML(v)
	if err != nil {
		return ""
	}
	return s
}

func mustToYAML(v interface{}) string {
	s, err := marshalYAML(v)
	if err != nil {
		panic(err)
	}
	return s
}

func marshalYAML(v interface{}) (string, error) {
	j, err := json.Marshal(v)
	if err != nil {
		return "", err
	}
	dec := json.NewDecoder(bytes.NewReader(j))
	dec.UseNumber()
	var obj interface{}
	if err := dec.Decode(&obj); err != nil {
		return "", err
	}
	return encodeYAML(jsonNumbers(obj))
}

// toYamlPretty marshals v itself (no JSON step), two spaces per level.
func toYAMLPretty(v interface{}) string {
	s, err := encodeYAML(v)
	if err != nil {
		return ""
	}
	return s
}

func encodeYAML(v interface{}) (string, error) {
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(v); err != nil {
		return "", err
	}
	if err := enc.Close(); err != nil {
		return "", err
	}
	return strings.TrimSuffix(buf.String(), "\n"), nil
}

// jsonNumbers turns JSON number literals into what a YAML reader of that JSON text
// gets: integers stay integers, the rest are floats.
func jsonNumbers(v interface{}) interface{} {
	switch t := v.(type) {
	case map[string]interface{}:
		for k, x := range t {
			t[k] = jsonNumbers(x)
		}
		return t
	case []interface{}:
		for i, x := range t {
			t[i] = jsonNumbers(x)
		}
		return t
	case json.Number:
		if i, err := strconv.ParseInt(string(t), 10, 64); err == nil {
			return i
		}
		if u, err := strconv.ParseUint(string(t), 10, 64); err == nil {
			return u
		}
		f, _ := t.Float64()
		return f
	}
	return v
}

// fromYaml reads a YAML mapping; on error the map holds only "Error" with the message.
func fromYAML(s string) map[string]interface{} {
	m := map[string]interface{}{}
	v, err := yamlToHelm([]byte(s))
	if err == nil {
		if v == nil {
			return m
		}
		if mm, ok := v.(map[string]interface{}); ok {
			return mm
		}
		err = fmt.Errorf("cannot unmarshal %T into a map", v)
	}
	m["Error"] = err.Error()
	return m
}

// fromYamlArray reads a YAML list; on error the list holds only the message.
func fromYAMLArray(s string) []interface{} {
	v, err := yamlToHelm([]byte(s))
	if err == nil {
		if v == nil {
			return []interface{}{}
		}
		if l, ok := v.([]interface{}); ok {
			return l
		}
		err = fmt.Errorf("cannot unmarshal %T into a list", v)
	}
	return []interface{}{err.Error()}
}

func toJSON(v interface{}) string {
	b, err := json.Marshal(v)
	if err != nil {
		return ""
	}
	return string(b)
}

func mustToJSON(v interface{}) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}

func fromJSON(s string) map[string]interface{} {
	m := map[string]interface{}{}
	if err := json.Unmarshal([]byte(s), &m); err != nil {
		m["Error"] = err.Error()
	}
	return m
}

func fromJSONArray(s string) []interface{} {
	a := []interface{}{}
	if err := json.Unmarshal([]byte(s), &a); err != nil {
		a = []interface{}{err.Error()}
	}
	return a
}
