package restapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"sort"
	"strconv"
	"strings"
)

// The write documents (GroupSpec, InstanceTemplateSpec, HookSpec,
// AccountSpec and ConfigFile) are read by one decoder whichever way they
// arrive: the REST API's JSON bodies and lifecycle's YAML file (converted
// to the same JSON tree first). It reports every unknown field and every
// value of the wrong type with its field path, accepts the deprecated
// spellings (declared by a field's `alias` tag) with a warning, and
// accepts an instance template given by name only ("instanceTemplate":
// "small" means {"name": "small"}).

// FieldError is one problem of a document at a field path such as
// "nodeGroups[2].autoscalingOptions.scaleDownUnneededTime" ("" for the
// document itself).
type FieldError struct {
	Field   string `json:"field"`
	Message string `json:"message"`
}

func (e FieldError) Error() string {
	if e.Field == "" {
		return e.Message
	}
	return e.Field + ": " + e.Message
}

// FieldErrors are every problem found in a document, in the order found.
type FieldErrors []FieldError

func (es FieldErrors) Error() string {
	msgs := make([]string, len(es))
	for i, e := range es {
		msgs[i] = e.Error()
	}
	return strings.Join(msgs, "; ")
}

func (es *FieldErrors) add(field, format string, args ...any) {
	*es = append(*es, FieldError{Field: field, Message: fmt.Sprintf(format, args...)})
}

// Warning is an accepted oddity of a document: a deprecated spelling.
type Warning struct {
	Field   string
	Message string
}

func (w Warning) String() string { return w.Field + ": " + w.Message }

// DecodeOptions tune Decode.
type DecodeOptions struct {
	// ScalarStrings accepts a number or boolean where a string is
	// expected (YAML writes `cpu: 2` for "2"); JSON bodies are strict.
	ScalarStrings bool
}

// Decode reads one JSON document into v (a pointer to a write document).
// The error is FieldErrors for problems of the document, or a syntax error.
func Decode(data []byte, v any, opts DecodeOptions) ([]Warning, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var doc any
	if err := dec.Decode(&doc); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("unexpected data after the JSON document")
	}
	return DecodeTree(doc, v, opts)
}

// DecodeTree is Decode of a document already parsed into a JSON tree
// (maps, slices, strings, json.Number or float64, bools and nils). On
// FieldErrors, v holds the rest of the document (the values in error
// dropped), for a caller that reports every problem at once.
func DecodeTree(doc any, v any, opts DecodeOptions) ([]Warning, error) {
	rv := reflect.ValueOf(v)
	if rv.Kind() != reflect.Pointer {
		return nil, errors.New("restapi.Decode needs a pointer")
	}
	n := normalizer{opts: opts}
	doc = n.walk(doc, rv.Type().Elem(), "")
	b, err := json.Marshal(doc)
	if err != nil {
		return n.warnings, append(n.errs, FieldError{Message: err.Error()})
	}
	strict := json.NewDecoder(bytes.NewReader(b))
	strict.DisallowUnknownFields()
	if err := strict.Decode(v); err != nil {
		// The walk checked names and types: this is a value the types
		// cannot hold that it missed.
		return n.warnings, append(n.errs, FieldError{Message: strings.TrimPrefix(err.Error(), "json: ")})
	}
	if len(n.errs) > 0 {
		return n.warnings, n.errs
	}
	return n.warnings, nil
}

// Normalize rewrites a JSON tree for the write document v points to
// (deprecated names renamed, templates by name made objects), for a JSON
// merge patch before it is merged into the canonical document. Nulls are
// kept (they delete in a merge patch).
func Normalize(doc any, v any) (any, []Warning, FieldErrors) {
	n := normalizer{}
	doc = n.walk(doc, reflect.TypeOf(v).Elem(), "")
	return doc, n.warnings, n.errs
}

type normalizer struct {
	opts     DecodeOptions
	warnings []Warning
	errs     FieldErrors
}

var (
	rawMessageType  = reflect.TypeOf(json.RawMessage(nil))
	templateSpecTyp = reflect.TypeOf(InstanceTemplateSpec{})
)

func join(path, field string) string {
	if field == "" {
		return path
	}
	if path == "" {
		return field
	}
	return path + "." + field
}

// jsonFields returns a struct's JSON field names (embedded structs
// flattened) with their types and aliases.
func jsonFields(t reflect.Type) (fields map[string]reflect.Type, aliases map[string]string) {
	fields, aliases = map[string]reflect.Type{}, map[string]string{}
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if f.Anonymous && name == "" && f.Type.Kind() == reflect.Struct {
			sub, subAliases := jsonFields(f.Type)
			for k, v := range sub {
				fields[k] = v
			}
			for k, v := range subAliases {
				aliases[k] = v
			}
			continue
		}
		if name == "-" {
			continue
		}
		if name == "" {
			name = f.Name
		}
		fields[name] = f.Type
		if a := f.Tag.Get("alias"); a != "" {
			for _, old := range strings.Split(a, ",") {
				aliases[old] = name
			}
		}
	}
	return fields, aliases
}

func kindOf(v any) string {
	switch v := v.(type) {
	case string:
		return fmt.Sprintf("string %q", v)
	case json.Number, float64:
		return fmt.Sprintf("number %v", v)
	case bool:
		return fmt.Sprintf("boolean %v", v)
	case []any:
		return "list"
	case map[string]any:
		return "object"
	}
	return fmt.Sprintf("%T", v)
}

func (n *normalizer) typeError(path string, v any, want string) {
	n.errs.add(path, "cannot unmarshal %s into %s", kindOf(v), want)
}

// walk checks v against t and returns it normalized; a value in error is
// dropped (ok false), so the rest of the document still decodes and every
// problem is reported at once.
func (n *normalizer) walk(v any, t reflect.Type, path string) (out any) {
	out, _ = n.check(v, t, path)
	return out
}

func (n *normalizer) check(v any, t reflect.Type, path string) (any, bool) {
	if v == nil {
		return nil, true
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == rawMessageType || t.Kind() == reflect.Interface {
		return v, true
	}
	switch t.Kind() {
	case reflect.Struct:
		if s, ok := v.(string); ok && t == templateSpecTyp {
			return map[string]any{"name": s}, true
		}
		obj, ok := v.(map[string]any)
		if !ok {
			n.typeError(path, v, "an object")
			return nil, false
		}
		fields, aliases := jsonFields(t)
		keys := make([]string, 0, len(obj))
		for k := range obj {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		out := make(map[string]any, len(obj))
		for _, k := range keys {
			name, val := k, obj[k]
			if canon, ok := aliases[k]; ok {
				if _, both := obj[canon]; both {
					n.errs.add(join(path, k), "is the deprecated name of %s: set only %s", canon, canon)
					continue
				}
				n.warnings = append(n.warnings, Warning{Field: join(path, k), Message: fmt.Sprintf("is deprecated: use %s", canon)})
				name = canon
				if fields[canon].Kind() == reflect.Slice {
					if _, list := val.([]any); !list && val != nil {
						val = []any{val}
					}
				}
			}
			ft, ok := fields[name]
			if !ok {
				n.errs.add(join(path, k), "unknown field %q%s", k, suggest(k, fields))
				continue
			}
			if nv, ok := n.check(val, ft, join(path, name)); ok {
				out[name] = nv
			}
		}
		return out, true
	case reflect.Map:
		obj, ok := v.(map[string]any)
		if !ok {
			n.typeError(path, v, "an object")
			return nil, false
		}
		for k, e := range obj {
			if nv, ok := n.check(e, t.Elem(), join(path, k)); ok {
				obj[k] = nv
			} else {
				delete(obj, k)
			}
		}
		return obj, true
	case reflect.Slice:
		list, ok := v.([]any)
		if !ok {
			n.typeError(path, v, "a list")
			return nil, false
		}
		for i, e := range list {
			list[i], _ = n.check(e, t.Elem(), fmt.Sprintf("%s[%d]", path, i))
		}
		return list, true
	case reflect.String:
		switch s := v.(type) {
		case string:
			return s, true
		case json.Number, float64, bool:
			if n.opts.ScalarStrings {
				return fmt.Sprint(s), true
			}
		}
		n.typeError(path, v, "a string")
		return nil, false
	case reflect.Bool:
		if _, ok := v.(bool); !ok {
			n.typeError(path, v, "a boolean")
			return nil, false
		}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		num, ok := number(v)
		if !ok {
			n.typeError(path, v, "an integer")
			return nil, false
		}
		if _, err := strconv.ParseInt(num, 10, t.Bits()); err != nil {
			n.errs.add(path, "cannot unmarshal number %s into an integer (%d bits)", num, t.Bits())
			return nil, false
		}
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		num, ok := number(v)
		if !ok {
			n.typeError(path, v, "an integer")
			return nil, false
		}
		if _, err := strconv.ParseUint(num, 10, t.Bits()); err != nil {
			n.errs.add(path, "cannot unmarshal number %s into a non-negative integer (%d bits)", num, t.Bits())
			return nil, false
		}
	case reflect.Float32, reflect.Float64:
		if _, ok := number(v); !ok {
			n.typeError(path, v, "a number")
			return nil, false
		}
	}
	return v, true
}

func number(v any) (string, bool) {
	switch v := v.(type) {
	case json.Number:
		return v.String(), true
	case float64:
		return strconv.FormatFloat(v, 'f', -1, 64), true
	}
	return "", false
}

// suggest proposes the field a typo most likely meant.
func suggest(got string, fields map[string]reflect.Type) string {
	best, bestD := "", 3
	names := make([]string, 0, len(fields))
	for name := range fields {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if d := distance(strings.ToLower(got), strings.ToLower(name)); d < bestD {
			best, bestD = name, d
		}
	}
	if best == "" {
		return "; known fields: " + strings.Join(names, ", ")
	}
	return fmt.Sprintf("; did you mean %q?", best)
}

// distance is the Levenshtein distance.
func distance(a, b string) int {
	prev := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur := make([]int, len(b)+1)
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev = cur
	}
	return prev[len(b)]
}
