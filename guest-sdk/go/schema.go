package tollgate

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
)

// SchemaOf returns the JSON Schema (JSON text) of the arguments struct A, for Tool.InputSchema:
//
//	type refundArgs struct {
//		OrderID     string  `json:"order_id" desc:"The order's id."`
//		AmountCents int     `json:"amount_cents"`
//		Reason      *string `json:"reason,omitempty"`
//		Speed       string  `json:"speed,omitempty" enum:"normal,express"`
//	}
//	... InputSchema: tollgate.SchemaOf[refundArgs](), Handler: tollgate.Handle(refund) ...
//
// Each exported field is a property named by its `json` tag (a field tagged `json:"-"` is left
// out); it is required unless tagged `omitempty` or a pointer. `desc` gives its description and
// `enum` its allowed values (comma-separated strings). Strings, booleans, integers, floats,
// slices, maps with string keys, pointers and nested structs map to their JSON Schema types; no
// other properties are allowed. Any other type panics, naming the field: a programming error
// that the first `list-tools` would otherwise hide.
func SchemaOf[A any]() string {
	schema := schemaOf(reflect.TypeOf((*A)(nil)).Elem(), "args")
	text, err := json.Marshal(schema)
	if err != nil {
		panic("tollgate.SchemaOf: " + err.Error())
	}
	return string(text)
}

// property is one JSON Schema object, its keys in a fixed order.
type property = map[string]any

func schemaOf(t reflect.Type, where string) property {
	switch t.Kind() {
	case reflect.Pointer:
		return schemaOf(t.Elem(), where)
	case reflect.String:
		return property{"type": "string"}
	case reflect.Bool:
		return property{"type": "boolean"}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return property{"type": "integer"}
	case reflect.Float32, reflect.Float64:
		return property{"type": "number"}
	case reflect.Slice, reflect.Array:
		return property{"type": "array", "items": schemaOf(t.Elem(), where+"[]")}
	case reflect.Map:
		if t.Key().Kind() != reflect.String {
			panic(fmt.Sprintf("tollgate.SchemaOf: %s: a map's keys must be strings, not %s", where, t.Key()))
		}
		return property{"type": "object", "additionalProperties": schemaOf(t.Elem(), where+"{}")}
	case reflect.Struct:
		properties := property{}
		required := []string{}
		for i := 0; i < t.NumField(); i++ {
			field := t.Field(i)
			if !field.IsExported() {
				continue
			}
			name, options, _ := strings.Cut(field.Tag.Get("json"), ",")
			if name == "-" {
				continue
			}
			if name == "" {
				name = field.Name
			}
			p := schemaOf(field.Type, where+"."+name)
			if desc := field.Tag.Get("desc"); desc != "" {
				p["description"] = desc
			}
			if enum := field.Tag.Get("enum"); enum != "" {
				p["enum"] = strings.Split(enum, ",")
			}
			properties[name] = p
			if !strings.Contains(","+options+",", ",omitempty,") && field.Type.Kind() != reflect.Pointer {
				required = append(required, name)
			}
		}
		return property{"type": "object", "properties": properties, "required": required, "additionalProperties": false}
	default:
		panic(fmt.Sprintf("tollgate.SchemaOf: %s: no JSON Schema for %s", where, t))
	}
}
