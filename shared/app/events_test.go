package app_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/aws/aws-lambda-go/events"

	"github.com/bettercompute/control-plane/shared/api"
)

// Every function folder has a sample event, and every API sample is a
// request its method accepts: the route is the catalog's and the body
// decodes strictly into the method's input.
func TestSampleEvents(t *testing.T) {
	dirs, err := filepath.Glob(filepath.Join("..", "..", "functions", "*"))
	if err != nil || len(dirs) == 0 {
		t.Fatalf("no functions: %v", err)
	}
	for _, dir := range dirs {
		name := filepath.Base(dir)
		t.Run(name, func(t *testing.T) {
			data, err := os.ReadFile(filepath.Join("..", "..", "events", name+".json"))
			if err != nil {
				t.Fatalf("events/%s.json: %v", name, err)
			}
			if name == api.ReconcilerFunction {
				var ev events.EventBridgeEvent
				if err := json.Unmarshal(data, &ev); err != nil || ev.DetailType != "Scheduled Event" {
					t.Fatalf("reconciler event: %v %q", err, ev.DetailType)
				}
				return
			}
			var ev events.APIGatewayV2HTTPRequest
			if err := json.Unmarshal(data, &ev); err != nil {
				t.Fatal(err)
			}
			if name == api.ConsoleFunction {
				// A fragment, behind the JWT authorizer: its claims are the viewer.
				if ev.RouteKey != "GET /console/f/{proxy+}" || !strings.HasPrefix(ev.RawPath, "/console/f/") || ev.RequestContext.Authorizer == nil {
					t.Fatalf("console event: %q %q", ev.RouteKey, ev.RawPath)
				}
				return
			}
			m := api.LookupPath(ev.RawPath)
			if m == nil || m.FunctionName() != name || ev.RouteKey != "POST "+m.Path() {
				t.Fatalf("event route %q does not belong to %s", ev.RouteKey, name)
			}
			in := reflectNew(m)
			if err := api.DecodeInput([]byte(ev.Body), in); err != nil {
				t.Fatalf("body: %v", err)
			}
		})
	}
}

func reflectNew(m *api.Method) any { return reflect.New(m.Input).Interface() }
