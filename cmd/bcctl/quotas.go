package main

import (
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/bettercompute/control-plane/shared/api"
)

// quotaTable and quotasTable print pools.offer and quotas.get (one quota),
// and quotas.list.
var (
	quotaTable  = oneTable(func(w io.Writer, a api.QuotaResult, _ time.Time) { printQuotas(w, []api.Quota{a.Quota}) })
	quotasTable = listTable(func(a api.ListQuotasResult) []api.Quota { return a.Quotas },
		func(w io.Writer, qs []api.Quota, _ time.Time) { printQuotas(w, qs) })
)

// printQuotas lists quota rows. USED is what the tenant's live
// reservations hold charged, from admission until they are terminal
// (future bookings included), not the devices held now; FREE is what a new
// admission may still take, and a row whose max was lowered below used
// shows by how much it is over.
func printQuotas(w io.Writer, qs []api.Quota) {
	fmt.Fprintln(w, "TENANT\tPOOL\tRESOURCE\tMAX\tUSED\tFREE")
	for _, q := range qs {
		free := strconv.FormatInt(q.Max-q.Used, 10)
		if q.Used > q.Max {
			free = fmt.Sprintf("0 (over by %d)", q.Used-q.Max)
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%d\t%s\n", q.TenantID, q.PoolID, q.Resource, q.Max, q.Used, free)
	}
}
