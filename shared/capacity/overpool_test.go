package capacity_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bettercompute/control-plane/shared/apierr"
)

// A count larger than the pool's devices is refused as before — over the
// owner's quota QUOTA_EXCEEDED, within it CAPACITY_EXHAUSTED — and the
// refusal says the pool's size (message and poolDevices), since no other
// window or higher max would ever fit it. A count that fits the pool but
// not the moment says nothing of the size.
func TestCountLargerThanThePool(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	e.pool(t, "acme", "p16", map[string]int{"gpu": 16})
	e.pool(t, "acme", "p8", map[string]int{"gpu": 8})
	e.offer(t, "acme", "p8", "globex", "gpu", 64)
	cases := []struct {
		tenant, pool string
		count, size  int
		code         apierr.Code
	}{
		{"acme", "p16", 40, 16, apierr.QuotaExceeded},     // the owner's quota is the pool's size
		{"globex", "p8", 20, 8, apierr.CapacityExhausted}, // an offer above the pool's size
		{"acme", "p16", 17, 16, apierr.QuotaExceeded},     // one more than the pool
		{"globex", "p8", 9, 8, apierr.CapacityExhausted},  // idem, within the offer
	}
	for _, c := range cases {
		_, err := e.svc.Admission().Create(ctx, e.req(c.tenant, c.pool, "gpu", c.count, 0, time.Hour), allow)
		if code(err) != c.code {
			t.Fatalf("%d on %s: %v, want %s", c.count, c.pool, err, c.code)
		}
		if got, _ := detail(err, "poolDevices").(int); got != c.size {
			t.Errorf("%d on %s: poolDevices %v, want %d", c.count, c.pool, detail(err, "poolDevices"), c.size)
		}
		if want := "the pool has " + strconv.Itoa(c.size) + " gpu devices"; !strings.Contains(apierr.As(err).Message, want) {
			t.Errorf("%d on %s: message %q lacks %q", c.count, c.pool, apierr.As(err).Message, want)
		}
	}
	// Fits the pool, not the moment: no size.
	must(e.svc.Admission().Create(ctx, e.req("acme", "p8", "gpu", 8, 0, time.Hour), allow))
	_, err := e.svc.Admission().Create(ctx, e.req("globex", "p8", "gpu", 4, 0, time.Hour), allow)
	if code(err) != apierr.CapacityExhausted || detail(err, "poolDevices") != nil {
		t.Errorf("4 on a busy 8-device pool: %v, poolDevices %v", err, detail(err, "poolDevices"))
	}
	e.check(t)
}
