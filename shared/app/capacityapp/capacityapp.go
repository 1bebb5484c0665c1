// Package capacityapp wires the capacity module (pools, quotas,
// reservations) on the app's core: what a capacity function's main names.
package capacityapp

import (
	"context"
	"strconv"
	"time"

	"github.com/bettercompute/control-plane/shared/api"
	"github.com/bettercompute/control-plane/shared/app"
	"github.com/bettercompute/control-plane/shared/capacity"
	"github.com/bettercompute/control-plane/shared/dynamo/capacitydb"
	"github.com/bettercompute/control-plane/shared/dynamo/fleetdb"
	"github.com/bettercompute/control-plane/shared/paging"
)

// Module is the capacity module's wiring.
type Module struct{}

// Name is the catalog's module name.
func (Module) Name() string { return "capacity" }

// Service builds the capacity module on the app's table and clock: each
// method's Build takes the flow it serves from it (Pools, Quotas,
// Admission, Reservations), and the fleet its Bindings (Adopt).
func Service(a *app.App) *capacity.Service {
	return &capacity.Service{Store: Store(a), Now: a.Now, Logger: a.Logger,
		Nodes: &fleetdb.Store{DB: a.DB, Table: a.Config.Table}, ProvisionHours: a.Config.ProvisionHours}
}

// Store is the capacity module's table access; it is also what the
// invariant checker (capacity.Check) reads.
func Store(a *app.App) *capacitydb.Store {
	return &capacitydb.Store{DB: a.DB, Table: a.Config.Table}
}

// Methods are the capacity methods' wirings, in catalog order.
func (m Module) Methods() []app.Method {
	return []app.Method{m.PoolsCreate(), m.PoolsOffer(), m.PoolsGet(), m.PoolsList(), m.PoolsUsage(),
		m.PoolsAvailability(), m.QuotasGet(), m.QuotasList(), m.ReservationsCreate(), m.ReservationsGet(), m.ReservationsList(), m.ReservationsRelease()}
}

// PoolsCreate is pools.create.
func (Module) PoolsCreate() app.Method {
	return app.Method{Name: "pools.create", Build: func(_ context.Context, a *app.App) (api.Endpoint, error) {
		pools := Service(a).Pools()
		return api.Bind(api.Lookup("pools.create"), func(ctx context.Context, call *api.Call, in *api.CreatePoolInput) (api.PoolResult, error) {
			p, err := pools.Create(ctx, in.TenantID, in.PoolID, in.Resources, in.NodeSize)
			return api.PoolResult{Pool: p.Pool}, err
		}), nil
	}}
}

// PoolsOffer is pools.offer.
func (Module) PoolsOffer() app.Method {
	return app.Method{Name: "pools.offer", Build: func(_ context.Context, a *app.App) (api.Endpoint, error) {
		pools := Service(a).Pools()
		return api.Bind(api.Lookup("pools.offer"), func(ctx context.Context, call *api.Call, in *api.OfferPoolInput) (api.QuotaResult, error) {
			q, err := pools.Offer(ctx, in.TenantID, in.PoolID, in.ToTenantID, in.Resource, in.Max)
			return api.QuotaResult{Quota: q}, err
		}), nil
	}}
}

// PoolsGet is pools.get.
func (Module) PoolsGet() app.Method {
	return app.Method{Name: "pools.get", Build: func(_ context.Context, a *app.App) (api.Endpoint, error) {
		pools := Service(a).Pools()
		return api.Bind(api.Lookup("pools.get"), func(ctx context.Context, call *api.Call, in *api.GetPoolInput) (api.PoolResult, error) {
			p, err := pools.Get(ctx, in.TenantID, in.PoolID)
			return api.PoolResult{Pool: p.Pool}, err
		}), nil
	}}
}

// PoolsList is pools.list.
func (Module) PoolsList() app.Method {
	return app.Method{Name: "pools.list", Build: func(_ context.Context, a *app.App) (api.Endpoint, error) {
		pools := Service(a).Pools()
		return api.Bind(api.Lookup("pools.list"), func(ctx context.Context, call *api.Call, in *api.ListPoolsInput) (api.ListPoolsResult, error) {
			ps, next, err := app.List(a, call, in.Page, paging.DefaultLimit, func(pg paging.Page) ([]capacity.Pool, map[string]string, error) {
				return pools.List(ctx, in.TenantID, pg)
			})
			return api.ListPoolsResult{Pools: wire(ps, func(p capacity.Pool) api.Pool { return p.Pool }), NextCursor: next}, err
		}), nil
	}}
}

// PoolsUsage is pools.usage.
func (Module) PoolsUsage() app.Method {
	return app.Method{Name: "pools.usage", Build: func(_ context.Context, a *app.App) (api.Endpoint, error) {
		pools := Service(a).Pools()
		return api.Bind(api.Lookup("pools.usage"), func(ctx context.Context, call *api.Call, in *api.PoolUsageInput) (api.PoolUsageResult, error) {
			q := capacity.UsageRequest{TenantID: in.TenantID, PoolID: in.PoolID, Resource: in.Resource, Hours: app.Deref(in.Hours)}
			from := ""
			if in.From != nil {
				q.From = *in.From
				from = in.From.UTC().Format(time.RFC3339Nano)
			}
			var u api.Usage
			_, next, err := app.List(a, call, api.Page{Limit: in.Limit, Cursor: in.Cursor}, api.DefaultUsageNodes, func(pg paging.Page) ([]api.Usage, map[string]string, error) {
				q.Page = pg
				var last map[string]string
				var err error
				u, last, err = pools.Usage(ctx, q)
				return nil, last, err
			}, "poolId="+in.PoolID, "resource="+in.Resource, "from="+from, "hours="+strconv.Itoa(q.Hours))
			if err != nil {
				return api.PoolUsageResult{}, err
			}
			return api.PoolUsageResult{Usage: u, NextCursor: next}, nil
		}), nil
	}}
}

// PoolsAvailability is pools.availability.
func (Module) PoolsAvailability() app.Method {
	return app.Method{Name: "pools.availability", Build: func(_ context.Context, a *app.App) (api.Endpoint, error) {
		av := &capacity.Availability{Store: Store(a), Nodes: &fleetdb.Store{DB: a.DB, Table: a.Config.Table}, Now: a.Now,
			ProvisionHours: a.Config.ProvisionHours}
		return api.Bind(api.Lookup("pools.availability"), func(ctx context.Context, call *api.Call, in *api.PoolAvailabilityInput) (api.PoolAvailabilityResult, error) {
			got, err := av.Ask(ctx, capacity.AvailabilityQuery{TenantID: in.TenantID, PoolID: in.PoolID, Resource: in.Resource,
				Count: in.Count, Hours: in.Hours, Topology: app.Deref(in.Topology), From: in.From, To: in.To, Limit: app.Deref(in.Limit)})
			return api.PoolAvailabilityResult{Availability: got}, err
		}), nil
	}}
}

// QuotasGet is quotas.get.
func (Module) QuotasGet() app.Method {
	return app.Method{Name: "quotas.get", Build: func(_ context.Context, a *app.App) (api.Endpoint, error) {
		quotas := Service(a).Quotas()
		return api.Bind(api.Lookup("quotas.get"), func(ctx context.Context, call *api.Call, in *api.GetQuotaInput) (api.QuotaResult, error) {
			q, err := quotas.Get(ctx, capacity.QuotaKey{TenantID: in.TenantID, PoolID: in.PoolID, Resource: in.Resource})
			return api.QuotaResult{Quota: q}, err
		}), nil
	}}
}

// QuotasList is quotas.list.
func (Module) QuotasList() app.Method {
	return app.Method{Name: "quotas.list", Build: func(_ context.Context, a *app.App) (api.Endpoint, error) {
		quotas := Service(a).Quotas()
		return api.Bind(api.Lookup("quotas.list"), func(ctx context.Context, call *api.Call, in *api.ListQuotasInput) (api.ListQuotasResult, error) {
			pool := app.Deref(in.PoolID)
			qs, next, err := app.List(a, call, in.Page, paging.DefaultLimit, func(pg paging.Page) ([]api.Quota, map[string]string, error) {
				return quotas.List(ctx, in.TenantID, pool, pg)
			}, "poolId="+pool)
			return api.ListQuotasResult{Quotas: qs, NextCursor: next}, err
		}), nil
	}}
}

// ReservationsCreate is reservations.create.
func (Module) ReservationsCreate() app.Method {
	return app.Method{Name: "reservations.create", Build: func(_ context.Context, a *app.App) (api.Endpoint, error) {
		admission := Service(a).Admission()
		return api.Bind(api.Lookup("reservations.create"), func(ctx context.Context, call *api.Call, in *api.CreateReservationInput) (api.ReservationResult, error) {
			r, err := admission.Create(ctx, capacity.CreateRequest{
				TenantID: in.TenantID, PoolID: in.PoolID, Resource: in.Resource, Count: in.Count,
				Topology: app.Deref(in.Topology), Start: in.Window.Start, End: in.Window.End,
				ClientToken: app.Deref(in.ClientToken), Principal: call.Principal,
			}, call.Decide)
			return api.ReservationResult{Reservation: r.Reservation}, err
		}), nil
	}}
}

// ReservationsGet is reservations.get.
func (Module) ReservationsGet() app.Method {
	return app.Method{Name: "reservations.get", Build: func(_ context.Context, a *app.App) (api.Endpoint, error) {
		reservations := Service(a).Reservations()
		return api.Bind(api.Lookup("reservations.get"), func(ctx context.Context, call *api.Call, in *api.GetReservationInput) (api.ReservationResult, error) {
			r, err := reservations.Get(ctx, in.TenantID, in.ReservationID)
			return api.ReservationResult{Reservation: r.Reservation}, err
		}), nil
	}}
}

// ReservationsList is reservations.list.
func (Module) ReservationsList() app.Method {
	return app.Method{Name: "reservations.list", Build: func(_ context.Context, a *app.App) (api.Endpoint, error) {
		reservations := Service(a).Reservations()
		return api.Bind(api.Lookup("reservations.list"), func(ctx context.Context, call *api.Call, in *api.ListReservationsInput) (api.ListReservationsResult, error) {
			st, err := app.Enum("state", in.State, api.ParseReservationState, api.ReservationStates)
			if err != nil {
				return api.ListReservationsResult{}, err
			}
			f := capacity.ListFilter{PoolID: app.Deref(in.PoolID), State: st}
			rs, next, err := app.List(a, call, in.Page, paging.DefaultLimit, func(pg paging.Page) ([]capacity.Reservation, map[string]string, error) {
				return reservations.List(ctx, in.TenantID, f, pg)
			}, "poolId="+f.PoolID, "state="+string(f.State))
			return api.ListReservationsResult{Reservations: wire(rs, func(r capacity.Reservation) api.Reservation { return r.Reservation }), NextCursor: next}, err
		}), nil
	}}
}

// ReservationsRelease is reservations.release.
func (Module) ReservationsRelease() app.Method {
	return app.Method{Name: "reservations.release", Build: func(_ context.Context, a *app.App) (api.Endpoint, error) {
		reservations := Service(a).Reservations()
		return api.Bind(api.Lookup("reservations.release"), func(ctx context.Context, call *api.Call, in *api.ReleaseReservationInput) (api.ReservationResult, error) {
			r, err := reservations.Release(ctx, in.TenantID, in.ReservationID)
			return api.ReservationResult{Reservation: r.Reservation}, err
		}), nil
	}}
}

// wire is what the API answers of each stored value: the wire type a
// domain type embeds.
func wire[T, W any](xs []T, view func(T) W) []W {
	out := make([]W, len(xs))
	for i, x := range xs {
		out[i] = view(x)
	}
	return out
}
