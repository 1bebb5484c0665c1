package api_test

import (
	"context"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/bettercompute/control-plane/shared/api"
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
