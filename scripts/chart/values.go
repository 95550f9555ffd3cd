// values.go - YAML as helm reads it, and helm's two ways of combining values.
//
// Helm reads YAML through sigs.k8s.io/yaml: YAML 1.1 scalars turned into JSON, then
// decoded as JSON. So every number is a float64 (`8388608` reaches a template as
// 8.388608e+06 unless the template converts it), map keys are strings, and a plain
// yes/no/on/off is a boolean. yamlToHelm gives the same shapes from gopkg.in/yaml.v3.
package main

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// YAML 1.1 booleans that yaml.v3 (YAML 1.2) reads as strings when they are plain.
var yaml11Bools = map[string]bool{
	"y": true, "Y": true, "yes": true, "Yes": true, "YES": true, "on": true, "On": true, "ON": true,
	"n": false, "N": false, "no": false, "No": false, "NO": false, "off": false, "Off": false, "OFF": false,
}

// parseYAMLDocs reads every document of data (helm merges the documents of a values
// file) into helm's value shapes.
func parseYAMLDocs(data []byte) ([]interface{}, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var docs []interface{}
	for {
		var n yaml.Node
		err := dec.Decode(&n)
		if errors.Is(err, io.EOF) {
			return docs, nil
		}
		if err != nil {
			return nil, err
		}
		v, err := nodeToHelm(&n)
		if err != nil {
			return nil, err
		}
		docs = append(docs, v)
	}
}

// yamlToHelm reads one YAML document (empty text: nil).
func yamlToHelm(data []byte) (interface{}, error) {
	docs, err := parseYAMLDocs(data)
	if err != nil || len(docs) == 0 {
		return nil, err
	}
	if len(docs) > 1 {
		return nil, errors.New("expected one YAML document, found several")
	}
	return docs[0], nil
}

func nodeToHelm(n *yaml.Node) (interface{}, error) {
	switch n.Kind {
	case yaml.DocumentNode:
		if len(n.Content) == 0 {
			return nil, nil
		}
		return nodeToHelm(n.Content[0])
	case yaml.AliasNode:
		return nodeToHelm(n.Alias)
	case yaml.SequenceNode:
		out := make([]interface{}, 0, len(n.Content))
		for _, c := range n.Content {
			v, err := nodeToHelm(c)
			if err != nil {
				return nil, err
			}
			out = append(out, v)
		}
		return out, nil
	case yaml.MappingNode:
		out := map[string]interface{}{}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, vn := n.Content[i], n.Content[i+1]
			if k.Kind == yaml.ScalarNode && k.Tag == "!!merge" {
				// `<<: *anchor` (or a list of them): keys not set here come from there.
				srcs := []*yaml.Node{vn}
				if vn.Kind == yaml.AliasNode {
					srcs = []*yaml.Node{vn.Alias}
				}
				if srcs[0].Kind == yaml.SequenceNode {
					srcs = srcs[0].Content
				}
				for _, s := range srcs {
					m, err := nodeToHelm(s)
					if err != nil {
						return nil, err
					}
					mm, ok := m.(map[string]interface{})
					if !ok {
						return nil, fmt.Errorf("line %d: a merge key needs a mapping", vn.Line)
					}
					for mk, mv := range mm {
						if _, set := out[mk]; !set {
							out[mk] = mv
						}
					}
				}
				continue
			}
			key, err := nodeToHelm(k)
			if err != nil {
				return nil, err
			}
			v, err := nodeToHelm(vn)
			if err != nil {
				return nil, err
			}
			out[keyString(key)] = v
		}
		return out, nil
	case yaml.ScalarNode:
		return scalarToHelm(n)
	}
	return nil, fmt.Errorf("line %d: unsupported YAML node", n.Line)
}

// JSON object keys are strings: other keys are printed as JSON would print them.
func keyString(k interface{}) string {
	switch v := k.(type) {
	case string:
		return v
	case nil:
		return "null"
	case float64:
		return strconv.FormatFloat(v, 'f', -1, 64)
	}
	return fmt.Sprint(k)
}

func scalarToHelm(n *yaml.Node) (interface{}, error) {
	switch n.ShortTag() {
	case "!!null":
		return nil, nil
	case "!!bool":
		var b bool
		err := n.Decode(&b)
		return b, err
	case "!!int":
		var i int64
		if err := n.Decode(&i); err == nil {
			return float64(i), nil
		}
		var u uint64
		if err := n.Decode(&u); err != nil {
			return nil, err
		}
		return float64(u), nil
	case "!!float":
		var f float64
		if err := n.Decode(&f); err != nil {
			return nil, err
		}
		if math.IsInf(f, 0) || math.IsNaN(f) {
			return nil, fmt.Errorf("line %d: %s has no JSON form", n.Line, n.Value)
		}
		return f, nil
	case "!!binary":
		b, err := base64.StdEncoding.DecodeString(strings.Join(strings.Fields(n.Value), ""))
		return string(b), err
	case "!!str", "!!timestamp":
		if n.Style == 0 && n.ShortTag() == "!!str" {
			if b, ok := yaml11Bools[n.Value]; ok {
				return b, nil
			}
		}
		return n.Value, nil
	}
	return n.Value, nil
}

// loadValuesFile reads a values file: a map, its documents merged in order.
func loadValuesFile(data []byte) (map[string]interface{}, error) {
	docs, err := parseYAMLDocs(data)
	if err != nil {
		return nil, err
	}
	vals := map[string]interface{}{}
	for _, d := range docs {
		if d == nil {
			continue
		}
		m, ok := d.(map[string]interface{})
		if !ok {
			return nil, fmt.Errorf("a values document must be a mapping, not %T", d)
		}
		vals = mergeMaps(vals, m)
	}
	return vals, nil
}

// mergeMaps combines user values files (-f a -f b): b's keys win; where both hold a
// map the maps are merged key by key; anything else (lists included) is replaced.
// nulls are kept: coalescing later decides what they remove.
func mergeMaps(a, b map[string]interface{}) map[string]interface{} {
	out := make(map[string]interface{}, len(a))
	for k, v := range a {
		out[k] = v
	}
	for k, v := range b {
		if bm, ok := v.(map[string]interface{}); ok {
			if am, ok := out[k].(map[string]interface{}); ok {
				out[k] = mergeMaps(am, bm)
				continue
			}
		}
		out[k] = v
	}
	return out
}

// coalesceValues lays the chart's defaults under the user's values (the user wins),
// as helm does for a chart without dependencies:
//   - a user null removes the key and its default;
//   - nulls among the defaults are dropped;
//   - maps are combined key by key; a map on one side and a scalar on the other keeps
//     the user's value (with a warning);
//   - a user null for a key that has no default stays null.
func coalesceValues(user, defaults map[string]interface{}, warn func(string)) map[string]interface{} {
	if user == nil {
		user = map[string]interface{}{}
	}
	for key, dv := range defaults {
		uv, set := user[key]
		if !set {
			if dv == nil {
				continue
			}
			if dm, ok := dv.(map[string]interface{}); ok {
				dropNils(dm)
			}
			user[key] = dv
			continue
		}
		if uv == nil {
			delete(user, key)
			continue
		}
		um, uIsMap := uv.(map[string]interface{})
		if !uIsMap {
			continue
		}
		dm, dIsMap := dv.(map[string]interface{})
		if !dIsMap {
			if dv != nil {
				warn(fmt.Sprintf("skipped value for %s: Not a table.", key))
			}
			continue
		}
		dropNils(dm)
		coalesceTables(um, dm, key, warn)
	}
	return user
}

func coalesceTables(dst, src map[string]interface{}, prefix string, warn func(string)) {
	srcHadValue := map[string]bool{}
	for k, v := range src {
		if v != nil {
			srcHadValue[k] = true
		}
	}
	for k, v := range dst {
		if v == nil {
			if _, ok := src[k]; !ok {
				src[k] = nil
			}
		}
	}
	for key, sv := range src {
		full := prefix + "." + key
		dv, set := dst[key]
		switch {
		case set && dv == nil && srcHadValue[key]:
			delete(dst, key)
		case !set:
			dst[key] = sv
		case isTable(sv):
			if isTable(dv) {
				coalesceTables(dv.(map[string]interface{}), sv.(map[string]interface{}), full, warn)
			} else {
				warn(fmt.Sprintf("cannot overwrite table with non table for %s (%v)", full, sv))
			}
		case isTable(dv) && sv != nil:
			warn(fmt.Sprintf("destination for %s is a table. Ignoring non-table value (%v)", full, sv))
		}
	}
}

func dropNils(m map[string]interface{}) {
	for k, v := range m {
		if v == nil {
			delete(m, k)
		} else if sub, ok := v.(map[string]interface{}); ok {
			dropNils(sub)
		}
	}
}

func isTable(v interface{}) bool {
	_, ok := v.(map[string]interface{})
	return ok
}

// deepCopy copies a JSON-shaped value so that rendering never changes the loaded values.
func deepCopy(v interface{}) interface{} {
	switch t := v.(type) {
	case map[string]interface{}:
		m := make(map[string]interface{}, len(t))
		for k, x := range t {
			m[k] = deepCopy(x)
		}
		return m
	case []interface{}:
		l := make([]interface{}, len(t))
		for i, x := range t {
			l[i] = deepCopy(x)
		}
		return l
	}
	return v
}
