package api_test

import (
	"bytes"
	"context"
	"slices"
	"strconv"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/bettercompute/control-plane/shared/api"
	"github.com/bettercompute/control-plane/shared/strictjson"
)

// loadOpenAPI generates the document and loads it with kin-openapi.
func loadOpenAPI(t *testing.T) *openapi3.T {
	t.Helper()
	b, err := api.OpenAPI()
	if err != nil {
		t.Fatal(err)
	}
	doc, err := openapi3.NewLoader().LoadFromData(b)
	if err != nil {
		t.Fatalf("load: %v", err)
	}
	return doc
}

// The generated document is valid OpenAPI 3.1 by kin-openapi's validator
// (JSON Schema 2020-12 for 3.1 documents).
func TestOpenAPIValid(t *testing.T) {
	doc := loadOpenAPI(t)
	if !doc.IsOpenAPI31OrLater() {
		t.Fatalf("openapi %q is not 3.1", doc.OpenAPI)
	}
	if err := doc.Validate(context.Background()); err != nil {
		t.Fatalf("validate: %v", err)
	}
}

// The validator is not vacuous: documents broken in ways a generator bug
// could break them are refused.
func TestOpenAPIValidatorRefusesBrokenDocuments(t *testing.T) {
	good, err := api.OpenAPI()
	if err != nil {
		t.Fatal(err)
	}
	for name, edit := range map[string][2]string{
		"unknown JSON type":   {`"type": "integer"`, `"type": "int"`},
		"dangling reference":  {`"#/components/schemas/Reservation"`, `"#/components/schemas/Nope"`},
		"invalid pattern":     {`"pattern": "^[a-z0-9][a-z0-9-]{0,62}$"`, `"pattern": "^[a-z0-9"`},
		"negative minLength":  {`"minLength": 1`, `"minLength": -1`},
		"info without title":  {`"title": "Better Compute control plane API",`, ``},
		"unknown scheme type": {`"type": "http"`, `"type": "telepathy"`},
	} {
		bad := bytes.Replace(good, []byte(edit[0]), []byte(edit[1]), 1)
		if bytes.Equal(bad, good) {
			t.Errorf("%s: the edit does not apply", name)
			continue
		}
		doc, err := openapi3.NewLoader().LoadFromData(bad)
		if err == nil {
			err = doc.Validate(context.Background())
		}
		if err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// The document has every catalog method, as the catalog describes it.
func TestOpenAPIFollowsTheCatalog(t *testing.T) {
	doc := loadOpenAPI(t)
	if got := doc.Paths.Len(); got != len(api.Catalog) {
		t.Errorf("%d paths, %d methods", got, len(api.Catalog))
	}
	if len(doc.Servers) == 0 || doc.Servers[0].URL != api.LocalServer {
		t.Errorf("servers %v, want %s first", doc.Servers, api.LocalServer)
	}
	sec := doc.Components.SecuritySchemes["bearer"]
	if sec == nil || sec.Value.Type != "http" || sec.Value.Scheme != "bearer" || sec.Value.BearerFormat != "JWT" {
		t.Errorf("security scheme %+v", sec)
	}
	if len(doc.Security) != 1 {
		t.Errorf("security %v", doc.Security)
	}
	for _, m := range api.Catalog {
		item := doc.Paths.Value(m.Path())
		if item == nil || item.Post == nil || len(item.Operations()) != 1 {
			t.Errorf("%s: no POST %s, or other operations", m.Name, m.Path())
			continue
		}
		op := item.Post
		if op.OperationID != m.OperationID() || len(op.Tags) != 1 || op.Tags[0] != m.Resource() {
			t.Errorf("%s: operationId %q, tags %v", m.Name, op.OperationID, op.Tags)
		}
		want := []string{"200"}
		for _, s := range m.ErrorStatuses() {
			want = append(want, strconv.Itoa(s.Status))
		}
		var got []string
		for code := range op.Responses.Map() {
			got = append(got, code)
		}
		slices.Sort(got)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Errorf("%s: responses %v, want %v", m.Name, got, want)
		}
		if ref := op.Responses.Status(200).Value.Content.Get("application/json").Schema.Ref; ref != "#/components/schemas/"+m.Output.Name() {
			t.Errorf("%s: 200 answers %s", m.Name, ref)
		}
		body := op.RequestBody.Value
		in := body.Content.Get("application/json").Schema.Value
		if !body.Required || in.AdditionalProperties.Has == nil || *in.AdditionalProperties.Has {
			t.Errorf("%s: the request body is optional or open to unknown members", m.Name)
		}
		var required []string
		for _, f := range strictjson.Fields(m.Input) {
			if f.Required {
				required = append(required, f.Name)
			}
			if in.Properties[f.Name] == nil {
				t.Errorf("%s: input member %s is not in the schema", m.Name, f.Name)
			}
		}
		if !slices.Equal(in.Required, required) {
			t.Errorf("%s: required %v, want %v", m.Name, in.Required, required)
		}
		// Each error answer is a complete schema of its own (no allOf
		// over a base a generator may not merge): code a string of the
		// status's codes, message and details required.
		for _, sc := range m.ErrorStatuses() {
			env := op.Responses.Status(sc.Status).Value.Content.Get("application/json").Schema.Value
			e := env.Properties["error"]
			if len(env.AllOf) > 0 || e == nil || !slices.Equal(env.Required, []string{"error", "requestId"}) {
				t.Errorf("%s %d: the envelope schema is not self-contained: %+v", m.Name, sc.Status, env)
				continue
			}
			code := e.Value.Properties["code"]
			if code == nil || !code.Value.Type.Is("string") || len(code.Value.Enum) != len(sc.Codes) ||
				e.Value.Properties["message"] == nil || !e.Value.Properties["message"].Value.Type.Is("string") ||
				!slices.Equal(e.Value.Required, []string{"code", "message", "details"}) {
				t.Errorf("%s %d: error %+v", m.Name, sc.Status, e.Value)
			}
		}
	}
	// The release manifest is a typed DSSE envelope, open to unknown
	// members as DSSE requires; its signatures too.
	manifest := doc.Components.Schemas["RegisterReleaseInput"].Value.Properties["manifest"].Value
	if len(manifest.AllOf) != 1 || manifest.AllOf[0].Ref != "#/components/schemas/Envelope" {
		t.Fatalf("manifest %+v", manifest)
	}
	env := doc.Components.Schemas["Envelope"].Value
	sigs := env.Properties["signatures"].Value
	sig := doc.Components.Schemas["EnvelopeSignature"].Value
	if !slices.Equal(env.Required, []string{"payloadType", "payload", "signatures"}) || env.AdditionalProperties.Has == nil || !*env.AdditionalProperties.Has ||
		sigs.Items.Ref != "#/components/schemas/EnvelopeSignature" || sigs.MaxItems == nil || *sigs.MaxItems != 16 ||
		!slices.Equal(sig.Required, []string{"sig"}) || sig.Properties["keyid"] == nil || sig.AdditionalProperties.Has == nil || !*sig.AdditionalProperties.Has {
		t.Errorf("envelope %+v\nsignatures %+v\nsignature %+v", env, sigs, sig)
	}
	// The constraints strict decoding enforces are the schema's.
	create := doc.Components.Schemas["CreateReservationInput"].Value
	count := create.Properties["count"].Value
	if count.Min == nil || *count.Min != 1 || count.Max == nil || *count.Max != api.MaxCount {
		t.Errorf("count %v..%v", count.Min, count.Max)
	}
	tenant := create.Properties["tenantId"].Value
	if tenant.MaxLength == nil || *tenant.MaxLength != 128 || tenant.Pattern != api.TenantIDPattern.String() {
		t.Errorf("tenantId maxLength %v pattern %q", tenant.MaxLength, tenant.Pattern)
	}
	if w := create.Properties["window"].Value; !slices.Equal(w.Required, []string{"end"}) || w.AdditionalProperties.Has == nil || *w.AdditionalProperties.Has {
		t.Errorf("window %+v", w)
	}
	if topo := create.Properties["topology"].Value; len(topo.Enum) != 2 {
		t.Errorf("topology enum %v", topo.Enum)
	}
	res := doc.Components.Schemas["CreatePoolInput"].Value.Properties["resources"].Value
	if res.MaxProps == nil || *res.MaxProps != api.MaxResources || res.MinProps != 1 ||
		res.AdditionalProperties.Schema == nil || *res.AdditionalProperties.Schema.Value.Max != api.MaxDevicesPerResource {
		t.Errorf("resources %+v", res)
	}
}
