package api

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/orrery-cluster/orrery/engine/grammar"
)

// responseFormat is OpenAI's response_format: "text", "json_object" (any
// JSON object) or "json_schema" (JSON that validates against the
// schema). The JSON kinds are enforced by grammar-constrained sampling.
type responseFormat struct {
	Type       string `json:"type"`
	JSONSchema *struct {
		Name   string          `json:"name"`
		Schema json.RawMessage `json:"schema"`
		// Strict is accepted either way: the schema is always enforced.
		Strict *bool `json:"strict"`
	} `json:"json_schema"`
}

// grammar is the constraint the format asks for (nil for text). A schema
// the grammar cannot enforce is an error naming its JSON pointer.
func (f *responseFormat) grammar() (*grammar.Spec, error) {
	if f == nil {
		return nil, nil
	}
	var schema json.RawMessage
	switch f.Type {
	case "", "text":
		return nil, nil
	case "json_object":
		schema = json.RawMessage(`{"type":"object"}`)
	case "json_schema":
		if f.JSONSchema == nil || len(f.JSONSchema.Schema) == 0 {
			return nil, errors.New("response_format.json_schema.schema is required for type json_schema")
		}
		schema = f.JSONSchema.Schema
	default:
		return nil, fmt.Errorf("response_format.type %q: want text, json_object or json_schema", f.Type)
	}
	return schemaSpec(schema, "response_format.json_schema.schema")
}

// schemaSpec is the grammar of a JSON value that schema admits, checked to
// compile: a schema the grammar cannot enforce is an error naming what
// (the request's field) and the schema's JSON pointer. Every protocol's
// JSON constraint (response_format, Ollama's format, forced tools' parameters)
// is checked here.
func schemaSpec(schema json.RawMessage, what string) (*grammar.Spec, error) {
	spec := &grammar.Spec{Alts: []grammar.Alt{{Schema: schema}}}
	if _, err := grammar.Compile(*spec); err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return spec, nil
}
