package strictjson_test

import (
	"reflect"
	"strings"
	"testing"

	"github.com/bettercompute/control-plane/shared/strictjson"
)

var _ = strictjson.RegisterLimits(map[string]int64{"test.MaxTags": 2})

type limited struct {
	Tags []string `json:"tags" bc:"required,max=test.MaxTags"`
}

// A tag that names a registered limit enforces and documents its value.
func TestTagQuotesRegisteredLimit(t *testing.T) {
	var v limited
	if err := strictjson.Decode([]byte(`{"tags":["a","b"]}`), &v, ""); err != nil {
		t.Fatalf("two tags under a limit of 2: %v", err)
	}
	err := strictjson.Decode([]byte(`{"tags":["a","b","c"]}`), &v, "")
	if err == nil || !strings.Contains(err.Error(), "2") {
		t.Fatalf("three tags under a limit of 2: %v", err)
	}
	docs := strictjson.Describe(reflect.TypeFor[limited]())
	if len(docs) != 1 || docs[0].Constraints != "at most 2 entries" {
		t.Fatalf("described as %+v", docs)
	}
}

type unregistered struct {
	N int `json:"n" bc:"max=test.Nowhere"`
}

func TestTagNamingAnUnregisteredLimitPanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("an unregistered limit name did not panic")
		}
	}()
	var v unregistered
	_ = strictjson.Decode([]byte(`{"n":1}`), &v, "")
}
