package app_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/bettercompute/control-plane/shared/api"
	"github.com/bettercompute/control-plane/shared/app"
	"github.com/bettercompute/control-plane/shared/devstack"
	"github.com/bettercompute/control-plane/shared/dynamo"
	"github.com/bettercompute/control-plane/shared/dynamo/schema"
	"github.com/bettercompute/control-plane/shared/localgw"
)

// benchResources spreads benchmark reservations over many calendars and
// quota rows (each item stays far below DynamoDB's 400 KB item limit).
const benchResources = 64

// clients runs n operations on c concurrent clients (c=1: sequential) and
// reports operations per second.
func clients(b *testing.B, c int, op func(i int) error) {
	b.Helper()
	var next atomic.Int64
	var wg sync.WaitGroup
	var failed atomic.Value
	b.ResetTimer()
	start := time.Now()
	for w := 0; w < c; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= b.N {
					return
				}
				if err := op(i); err != nil {
					failed.Store(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	if err, _ := failed.Load().(error); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "ops/s")
}

// BenchmarkReservationsCreate measures reservations.create over HTTP through
// the local gateway (the handlers the Lambdas run; policy-file IAM;
// dynalite), sequentially and with 16 concurrent clients, next to a raw
// conditional UpdateItem on the same dynalite in the same run.
func BenchmarkReservationsCreate(b *testing.B) {
	rt := &dynamo.RoundTrips{}
	h := newHarness(b, setup{module: "capacity", options: []app.Option{app.WithDynamoOptions(rt.Option()), app.WithDevTokens()}})
	create := h.endpoint("reservations.create")
	srv := httptest.NewServer(localgw.Handler(h.app.Gateway, []api.Endpoint{create}))
	b.Cleanup(srv.Close)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	post := func(body any) (int, string, error) {
		raw, _ := json.Marshal(body)
		req, _ := http.NewRequest(http.MethodPost, srv.URL+create.Method.Path(), bytes.NewReader(raw))
		req.Header.Set("Authorization", "Bearer dev:admin")
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err != nil {
			return 0, "", err
		}
		defer resp.Body.Close()
		out, err := io.ReadAll(resp.Body)
		return resp.StatusCode, string(out), err
	}
	resources := map[string]any{}
	for r := 0; r < benchResources; r++ {
		resources["gpu"+strconv.Itoa(r)] = 128
	}
	h.ok("admin", "pools.create", map[string]any{"tenantId": "acme", "poolId": "bench", "resources": resources})
	for r := 0; r < benchResources; r++ {
		h.ok("admin", "pools.offer", map[string]any{"tenantId": "acme", "poolId": "bench", "toTenantId": "acme", "resource": "gpu" + strconv.Itoa(r), "max": 1_000_000})
	}
	base := time.Now().UTC().Add(time.Minute).Truncate(time.Minute)
	var seq atomic.Int64
	createOne := func(int) error {
		i := seq.Add(1)
		start := base.Add(time.Duration(i%100_000) * time.Minute)
		st, body, err := post(map[string]any{"tenantId": "acme", "poolId": "bench", "resource": "gpu" + strconv.Itoa(int(i%benchResources)),
			"count": 1, "window": map[string]any{"start": start.Format(time.RFC3339), "end": start.Add(time.Minute).Format(time.RFC3339)}})
		if err != nil {
			return err
		}
		if st != 200 {
			return fmt.Errorf("create: %d %s", st, body)
		}
		return nil
	}
	db := devstack.Shared(b).DynamoDB()
	raw := func(i int) error {
		upd := expression.Set(expression.Name("used"), expression.Plus(expression.IfNotExists(expression.Name("used"), expression.Value(0)), expression.Value(1)))
		e, _ := expression.NewBuilder().WithUpdate(upd).WithCondition(
			expression.Or(expression.AttributeNotExists(expression.Name("used")), expression.Name("used").LessThan(expression.Value(1<<40)))).Build()
		_, err := db.UpdateItem(context.Background(), &dynamodb.UpdateItemInput{TableName: aws.String(h.app.Config.Table),
			Key: map[string]types.AttributeValue{schema.AttrPK: &types.AttributeValueMemberS{Value: "BENCH#" + strconv.Itoa(i%benchResources)},
				schema.AttrSK: &types.AttributeValueMemberS{Value: "ROW"}},
			UpdateExpression: e.Update(), ConditionExpression: e.Condition(),
			ExpressionAttributeNames: e.Names(), ExpressionAttributeValues: e.Values()})
		return err
	}
	for _, c := range []int{1, 16} {
		name := "sequential"
		if c > 1 {
			name = fmt.Sprintf("concurrent-%d", c)
		}
		b.Run("local-gateway-http/"+name, func(b *testing.B) {
			rt.Reset()
			clients(b, c, createOne)
			b.ReportMetric(float64(rt.Count())/float64(b.N), "dynamodb-calls/op")
		})
		b.Run("raw-conditional-update/"+name, func(b *testing.B) { clients(b, c, raw) })
	}
}
