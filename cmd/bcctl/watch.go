package main

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/bettercompute/control-plane/shared/api"
)

// watchCommand is `bcctl reservations watch ID`: the reservation's timeline,
// then each transition as it happens, until a terminal state (or --until).
func (c *cli) watchCommand() *cobra.Command {
	var until string
	var every time.Duration
	cmd := &cobra.Command{
		Use:   "watch ID",
		Short: "Print a reservation's transitions as they happen, until it is terminal",
		Long: `Prints the reservation's timeline so far (reservations.get), then each state it enters, polling
every --interval, and exits when it reaches a terminal state (denied, rejected, expired, released)
or the state given by --until. The exit code is 0 when it ended in the state waited for (with
--until) or in any terminal state (without), 1 when --until can no longer be reached.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if until != "" {
				if _, ok := api.ParseReservationState(until); !ok {
					return usageErr(fmt.Errorf("--until: %q is not a state (%v)", until, enumValues(api.StateEnum.Name)))
				}
			}
			if every <= 0 {
				return usageErr(fmt.Errorf("--interval must be positive"))
			}
			if c.tenant == "" {
				return usageErr(fmt.Errorf("reservations watch: --tenant (or BC_TENANT) is required"))
			}
			in := map[string]string{"tenantId": c.tenant, "reservationId": args[0]}
			seen := 0
			for {
				var a api.ReservationResult
				if err := c.callJSON(cmd.Context(), "reservations.get", in, &a); err != nil {
					return err
				}
				r := a.Reservation
				for ; seen < len(r.History); seen++ {
					e := r.History[seen]
					line := fmt.Sprintf("%s  %s", stamp(e.At), e.State)
					if e.Reason != "" {
						line += " (" + eventReason(e) + ")"
					}
					if e.State == api.Placed && len(r.NodeIDs) > 0 {
						line += fmt.Sprintf("  %d × %s on %s", r.Count, r.Resource, idRanges(r.NodeIDs))
					}
					if e.State == api.Released && r.ReleasedBy != "" {
						line += "  by " + r.ReleasedBy
					}
					if c.output == "json" {
						out, _ := json.Marshal(e)
						line = string(out)
					}
					fmt.Fprintln(c.out, line)
				}
				switch {
				case until != "" && string(r.State) == until:
					return nil
				case r.State.Terminal() && until == "":
					return nil
				case r.State.Terminal():
					fmt.Fprintf(c.errOut, "bcctl: %s is %s: it will not become %s\n", r.ReservationID, r.State, until)
					return exitCode(exitAPIError)
				case until != "" && passed(r.State, api.ReservationState(until)):
					fmt.Fprintf(c.errOut, "bcctl: %s is %s, past %s\n", r.ReservationID, r.State, until)
					return exitCode(exitAPIError)
				}
				if err := c.sleep(cmd.Context(), every); err != nil {
					return err
				}
			}
		},
	}
	cmd.Flags().StringVar(&until, "until", "", "exit once the reservation is in this state (e.g. active)")
	cmd.Flags().DurationVar(&every, "interval", time.Second, "how often to ask")
	_ = cmd.RegisterFlagCompletionFunc("until", fixed(enumValues(api.StateEnum.Name)...))
	return cmd
}

// passed reports whether a live reservation in state cur can no longer
// reach want (the life goes placed → binding → active).
func passed(cur, want api.ReservationState) bool {
	order := map[api.ReservationState]int{api.Draft: 0, api.Placed: 1, api.Binding: 2, api.Active: 3}
	c, ok1 := order[cur]
	w, ok2 := order[want]
	return ok1 && ok2 && c > w
}
