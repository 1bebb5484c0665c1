package api

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// OpenAPIVersion is the version of the OpenAPI specification the document
// follows: 3.1, whose schemas are JSON Schema 2020-12.
const OpenAPIVersion = "3.1.0"

// OpenAPI renders docs/openapi.json from the catalog: every method as
// `POST /api/compute/{resource}/{verb}` with its input as the request body
// schema (with the constraints strict decoding enforces), its output as the
// 200 response and every error status it answers with the error envelope,
// narrowed to the codes and details keys of that method.
func OpenAPI() ([]byte, error) {
	s := newSchemas()
	paths := obj()
	for _, r := range ResourceDocs {
		for _, m := range r.Methods() {
			paths.set(m.Path(), obj("post", operation(s, m)))
		}
	}
	var tags []*object
	for _, r := range ResourceDocs {
		tags = append(tags, obj("name", r.Name, "description", r.Summary))
	}
	doc := obj(
		"openapi", OpenAPIVersion,
		"info", obj(
			"title", "Better Compute control plane API",
			"version", latestPhase(),
			"description", "Generated from the method catalog (shared/api/catalog.go) by `make docs`. "+
				"Wire conventions, the reservation state machine, limits and the meaning of every documented value: docs/reference/README.md in the repository.\n\n"+
				"Decoding rules beyond the schemas:\n\n- "+strings.Join(WireRules, "\n- "),
			"contact", obj("name", "Better Compute control plane team"),
			"license", obj("name", "Proprietary: internal to Better Compute", "identifier", "LicenseRef-BetterCompute-Proprietary"),
		),
		"servers", []*object{obj("url", LocalServer, "description", "the local gateway of `make run` (BC_LISTEN)")},
		"security", []*object{obj("bearer", []string{})},
		"tags", tags,
		"paths", paths,
		"components", obj(
			"schemas", s.components,
			"headers", obj("RequestId", obj("description", "the request's id (also the error envelope's requestId)", "schema", obj("type", "string"))),
			"securitySchemes", obj("bearer", obj(
				"type", "http", "scheme", "bearer", "bearerFormat", "JWT",
				"description", "A JWT whose `sub` claim is the principal (API Gateway's JWT authorizer). The local gateway also accepts `dev:<principal>` as the token.",
			)),
		),
	)
	b, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// OperationID is a method's operationId: "reservationsCreate", as the
// typed client's method is named.
func (m *Method) OperationID() string {
	v := m.Verb()
	return m.Resource() + strings.ToUpper(v[:1]) + v[1:]
}

func operation(s *schemas, m *Method) *object {
	desc := m.Summary
	for _, n := range m.Notes {
		if n.Label != "" {
			desc += "\n\n**" + n.Label + ".** " + n.Text
		} else {
			desc += "\n\n" + n.Text
		}
	}
	auth := fmt.Sprintf("\n\nAuthorization: `%s` @ `%s`", m.Permission, m.Scope)
	if m.DecideOnDraft {
		auth += " (decided once, on the draft)"
	}
	requestID := obj("x-request-id", obj("$ref", "#/components/headers/RequestId"))
	responses := obj("200", obj(
		"description", "the result",
		"headers", requestID,
		"content", obj("application/json", obj("schema", s.output(m.Output))),
	))
	for _, sc := range m.ErrorStatuses() {
		responses.set(strconv.Itoa(sc.Status), errorResponse(m, sc, requestID))
	}
	return obj(
		"operationId", m.OperationID(),
		"tags", []string{m.Resource()},
		"summary", m.Brief(),
		"description", desc+auth,
		"x-permission", m.Permission,
		"x-scope", m.Scope,
		"x-kind", string(m.Kind),
		"x-phase", m.Phase,
		"requestBody", obj("required", true, "content", obj("application/json", obj("schema", s.input(m.Input)))),
		"responses", responses,
	)
}

// errorResponse is the envelope narrowed to the codes m answers with this
// status, and to the details keys those cases carry.
func errorResponse(m *Method, sc StatusCodes, headers *object) *object {
	var when []string
	details := obj()
	values := map[string][]string{}
	open := map[string]bool{} // a key some case carries without a fixed set of values
	for _, e := range m.ErrorCases() {
		if !slices.Contains(sc.Codes, e.Code) {
			continue
		}
		when = append(when, "`"+string(e.Code)+"`: "+e.When)
		for _, d := range e.Details {
			if details.get(d.Key) == nil {
				details.set(d.Key, detailSchema(d.Key))
			}
			if len(d.Values) == 0 || d.Key == "field" {
				open[d.Key] = true
			}
			for _, v := range d.Values {
				if !slices.Contains(values[d.Key], v) {
					values[d.Key] = append(values[d.Key], v)
				}
			}
		}
	}
	for _, k := range details.keys {
		if v := values[k]; len(v) > 0 && !open[k] {
			details.get(k).(*object).set("enum", v)
		}
	}
	// A complete schema for each status (no allOf over a shared base):
	// generated clients type code, message and details from it alone.
	codes := make([]string, len(sc.Codes))
	for i, c := range sc.Codes {
		codes[i] = string(c)
	}
	envelope := obj(
		"type", "object",
		"description", "The error envelope: `code` and `details` are the contract, `message` is for people.",
		"properties", obj(
			"error", obj(
				"type", "object",
				"properties", obj(
					"code", obj("type", "string", "enum", codes, "description", "the error code; the HTTP status follows from it"),
					"message", obj("type", "string", "description", "what went wrong, for people"),
					"details", obj("type", "object", "properties", details,
						"description", "what a caller needs to act on the error (always present, empty when there is nothing to add)"),
				),
				"required", []string{"code", "message", "details"},
				"additionalProperties", false,
			),
			"requestId", obj("type", "string", "description", "the request's id, also the x-request-id header; quote it when reporting a problem"),
		),
		"required", []string{"error", "requestId"},
		"additionalProperties", false,
	)
	return obj(
		"description", strings.Join(when, "\n\n"),
		"headers", headers,
		"content", obj("application/json", obj("schema", envelope)),
	)
}

func detailSchema(key string) *object {
	k := LookupDetailKey(key)
	if k == nil {
		panic("api: undocumented details key " + key)
	}
	o := obj("type", k.Type)
	if k.Type == "array" {
		o.set("items", obj("type", "string"))
	}
	if k.Enum != nil {
		o.set("enum", k.Enum.Strings())
	}
	return o.set("description", k.Doc)
}

// latestPhase is the newest phase of the catalog: the document's version.
func latestPhase() string {
	v := ""
	for _, m := range Catalog {
		if m.Phase > v {
			v = m.Phase
		}
	}
	return v
}
