// Package bench measures the API through the local gateway over real HTTP,
// against the real local servers (make bench). Latency percentiles and
// DynamoDB round trips per call are reported as benchmark metrics.
package bench

import (
	"bytes"
	"crypto"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/bettercompute/control-plane/shared/app"
	"github.com/bettercompute/control-plane/shared/devstack"
	"github.com/bettercompute/control-plane/shared/dynamo"
	"github.com/bettercompute/control-plane/shared/iam"
	"github.com/bettercompute/control-plane/shared/release"
	"github.com/bettercompute/control-plane/test/teststack"
)

func TestMain(m *testing.M) { devstack.Main(m) }

// server is the full app behind the local gateway (test/teststack), counting
// DynamoDB round trips, with a generated release key pinned.
type server struct {
	URL string
	RT  *dynamo.RoundTrips
	Key crypto.Signer
}

// startStack starts the app as every benchmark runs it: cursor key "bench",
// and a policy letting the principal admin do anything; opts add to that.
func startStack(b testing.TB, opts ...teststack.Option) *teststack.Stack {
	b.Helper()
	admin := &iam.Policy{Grants: []iam.Grant{{Principal: "admin", Permissions: []string{"*"}, Scopes: []string{"*"}}}}
	return teststack.Start(b, append([]teststack.Option{teststack.WithCursorKey("bench"), teststack.WithDecider(admin)}, opts...)...)
}

func newServer(b *testing.B) *server {
	b.Helper()
	key, err := release.GenerateKey(release.AlgECDSAP256)
	if err != nil {
		b.Fatal(err)
	}
	rt := &dynamo.RoundTrips{}
	st := startStack(b, teststack.WithPins(teststack.Pins{Keys: []crypto.PublicKey{key.Public()}}),
		teststack.WithAppOptions(app.WithDynamoOptions(rt.Option())))
	return &server{URL: st.URL, RT: rt, Key: key}
}

func (s *server) post(b *testing.B, method string, body []byte) time.Duration {
	d, _ := s.do(b, method, body)
	return d
}

// do calls a method as the admin principal and fails the benchmark on any
// answer but 200; it returns the latency and the response body.
func (s *server) do(b testing.TB, method string, body []byte) (time.Duration, []byte) {
	b.Helper()
	start := time.Now()
	req, _ := http.NewRequest(http.MethodPost, s.URL+"/api/compute/"+method, bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer dev:admin")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	data, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		b.Fatalf("%s: %d %s", method, resp.StatusCode, data)
	}
	return time.Since(start), data
}

func (s *server) manifest(b *testing.B, seq int) []byte {
	st := fmt.Sprintf(`{"version":"1.0.%d","sequence":%d,"binaries":[{"platform":"linux/amd64","url":"https://dl.example.com/bcd","sha256":"%064x","size":1}]}`, seq, seq, seq)
	env, err := release.SignEnvelope([]byte(st), s.Key)
	if err != nil {
		b.Fatal(err)
	}
	return []byte(fmt.Sprintf(`{"tenantId":"platform","manifest":%s}`, env))
}

// report adds latency percentiles and round trips per call.
func report(b *testing.B, lat []time.Duration, roundTrips int64) {
	b.ReportMetric(pct(lat, 0.5), "p50-ms")
	b.ReportMetric(pct(lat, 0.99), "p99-ms")
	b.ReportMetric(float64(roundTrips)/float64(len(lat)), "ddb-calls/op")
}

func BenchmarkReleasesRegister(b *testing.B) {
	s := newServer(b)
	s.registerEach(b, 1)
}

// registerEach registers b.N new releases, sequences from next on, and
// reports their latency and round trips.
func (s *server) registerEach(b *testing.B, next int) {
	bodies := make([][]byte, b.N)
	for i := range bodies {
		bodies[i] = s.manifest(b, next+i)
	}
	lat := make([]time.Duration, 0, b.N)
	s.RT.Reset()
	b.ResetTimer()
	for i := range b.N {
		lat = append(lat, s.post(b, "releases/register", bodies[i]))
	}
	b.StopTimer()
	report(b, lat, s.RT.Count())
}

func BenchmarkReleasesListPage(b *testing.B) {
	s := newServer(b)
	for i := 1; i <= 150; i++ {
		s.post(b, "releases/register", s.manifest(b, i))
	}
	body := []byte(`{"tenantId":"platform","limit":100}`)
	lat := make([]time.Duration, 0, b.N)
	s.RT.Reset()
	b.ResetTimer()
	for range b.N {
		lat = append(lat, s.post(b, "releases/list", body))
	}
	b.StopTimer()
	report(b, lat, s.RT.Count())
}
