package cli

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/loom-ml/loom/libs/paging"
	"github.com/loom-ml/loom/libs/resname"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

func (a *app) reservationName(s string) string {
	return fullName(s, func(id string) fmt.Stringer { return resname.Reservation{Project: a.project, ID: id} })
}

func (a *app) reservationsCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:     "reservations",
		Aliases: []string{"reservation"},
		Short:   "Reserve capacity (machines of one type in one zone) for clusters to claim",
		Long: `Reservations are capacity held for this project: COUNT machines of one type in
one zone. A node pool with "capacity": {"type": "RESERVATION", "reservation":
NAME} claims its nodes from it; deleting or shrinking the cluster releases them.

  loom reservations create r1 --zone us-central1-a --machine-type a3-ultragpu-8g --count 4
  loom reservations list
  loom capacity`,
	}
	cmd.AddCommand(a.reservationsCreateCommand(), a.reservationsGetCommand(), a.reservationsListCommand(), a.reservationsDeleteCommand())
	return cmd
}

func (a *app) reservationsCreateCommand() *cobra.Command {
	var r loomv1.Reservation
	var async bool
	cmd := &cobra.Command{
		Use:   "create NAME --zone Z --machine-type M --count N",
		Short: "Reserve N machines of type M in zone Z",
		Args:  exactArgs(1, "the reservation's name, e.g. `loom reservations create r1 --zone us-central1-a --machine-type a3-ultragpu-8g --count 4`"),
		RunE: func(cmd *cobra.Command, args []string) error {
			var missing []string
			if r.GetZone() == "" {
				missing = append(missing, "--zone")
			}
			if r.GetMachineType() == "" {
				missing = append(missing, "--machine-type")
			}
			if len(missing) > 0 {
				return usagef("%s %s required", strings.Join(missing, " and "), plural(len(missing), "is", "are"))
			}
			if r.GetCount() < 1 {
				return usagef("--count must be at least 1, got %d", r.GetCount())
			}
			cl, err := a.reservations()
			if err != nil {
				return err
			}
			id := shortName(args[0])
			ctx, cancel := a.call(cmd.Context())
			defer cancel()
			op, err := cl.CreateReservation(ctx, &loomv1.CreateReservationRequest{
				Parent: a.parent(), ReservationId: id, Reservation: &r, RequestId: requestID(),
			})
			if err != nil {
				return a.explain("create reservation "+id, err)
			}
			return a.followOperation(cmd, op, opView{
				title: fmt.Sprintf("Reserving %d × %s in %s as %s", r.GetCount(), r.GetMachineType(), r.GetZone(), id),
				what:  "create reservation " + id,
				async: async,
				hint:  "See it with `loom reservations list`.",
				final: func(op *loomv1.Operation, took time.Duration) string {
					return fmt.Sprintf("Reservation %s holds %d × %s in %s (%s)", id, r.GetCount(), r.GetMachineType(), r.GetZone(), elapsed(took))
				},
			})
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&r.Zone, "zone", "", "zone of the machines, e.g. us-central1-a")
	fl.StringVar(&r.MachineType, "machine-type", "", "machine type, e.g. a3-ultragpu-8g")
	fl.Int32Var(&r.Count, "count", 0, "number of machines")
	fl.BoolVar(&async, "async", false, "print the operation's name and return without waiting")
	return cmd
}

func (a *app) reservationsGetCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "get NAME",
		Short: "Show a reservation and which clusters use it",
		Args:  exactArgs(1, "the reservation's name, e.g. `loom reservations get r1`"),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := a.reservations()
			if err != nil {
				return err
			}
			ctx, cancel := a.call(cmd.Context())
			defer cancel()
			r, err := cl.GetReservation(ctx, &loomv1.GetReservationRequest{Name: a.reservationName(args[0])})
			if err != nil {
				return a.notFoundHint(a.explain("get reservation "+args[0], err), err, "loom reservations list")
			}
			if a.output == "json" {
				return writeJSON(cmd.OutOrStdout(), r)
			}
			return renderReservations(cmd.OutOrStdout(), []*loomv1.Reservation{r}, a.now())
		},
	}
}

func (a *app) reservationsListCommand() *cobra.Command {
	return &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List the project's reservations with how much of each is in use",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cl, err := a.reservations()
			if err != nil {
				return err
			}
			resp := &loomv1.ListReservationsResponse{}
			err = paging.Each(func(token string) (string, error) {
				ctx, cancel := a.call(cmd.Context())
				defer cancel()
				page, err := cl.ListReservations(ctx, &loomv1.ListReservationsRequest{Parent: a.parent(), PageToken: token})
				resp.Reservations = append(resp.Reservations, page.GetReservations()...)
				return page.GetNextPageToken(), err
			})
			if err != nil {
				return a.explain("list reservations", err)
			}
			if a.output == "json" {
				return writeJSON(cmd.OutOrStdout(), resp)
			}
			if len(resp.GetReservations()) == 0 {
				fmt.Fprintf(cmd.OutOrStdout(), "No reservations in project %s. Create one with `loom reservations create NAME --zone Z --machine-type M --count N`.\n", a.project)
				return nil
			}
			return renderReservations(cmd.OutOrStdout(), resp.GetReservations(), a.now())
		},
	}
}

func (a *app) reservationsDeleteCommand() *cobra.Command {
	var async bool
	cmd := &cobra.Command{
		Use:   "delete NAME",
		Short: "Delete a reservation (refused while clusters use it)",
		Args:  exactArgs(1, "the reservation's name, e.g. `loom reservations delete r1`"),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := a.reservations()
			if err != nil {
				return err
			}
			id := shortName(args[0])
			ctx, cancel := a.call(cmd.Context())
			defer cancel()
			op, err := cl.DeleteReservation(ctx, &loomv1.DeleteReservationRequest{Name: a.reservationName(args[0]), RequestId: requestID()})
			if err != nil {
				return a.notFoundHint(a.explain("delete reservation "+id, err), err, "loom reservations list")
			}
			return a.followOperation(cmd, op, opView{
				title: "Deleting reservation " + id,
				what:  "delete reservation " + id,
				async: async,
				final: func(_ *loomv1.Operation, took time.Duration) string {
					return fmt.Sprintf("Reservation %s deleted (%s)", id, elapsed(took))
				},
			})
		},
	}
	cmd.Flags().BoolVar(&async, "async", false, "print the operation's name and return without waiting")
	return cmd
}

func renderReservations(w io.Writer, rs []*loomv1.Reservation, now time.Time) error {
	tw := newTable(w)
	row(tw, "NAME", "ZONE", "MACHINE TYPE", "IN USE / TOTAL", "CONSUMERS", "AGE")
	for _, r := range rs {
		consumers := make([]string, len(r.GetConsumers()))
		for i, c := range r.GetConsumers() {
			consumers[i] = shortName(c)
		}
		row(tw, shortName(r.GetName()), r.GetZone(), r.GetMachineType(),
			fmt.Sprintf("%d / %d", r.GetInUse(), r.GetCount()), strings.Join(consumers, ","), age(r.GetCreateTime(), now))
	}
	return tw.Flush()
}

func (a *app) capacityCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "capacity",
		Short: "Show the capacity per zone and machine type: total, in use and free",
		Long: `Show every capacity pool the provisioner knows: per zone, machine type and
kind (RESERVATION with its name, ON_DEMAND, SPOT, FLEX_START), how many
machines there are, how many clusters hold, and how many are free.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cl, err := a.reservations()
			if err != nil {
				return err
			}
			resp, err := a.listCapacity(cmd.Context(), cl)
			if err != nil {
				return err
			}
			if a.output == "json" {
				return writeJSON(cmd.OutOrStdout(), resp)
			}
			if len(resp.GetPools()) == 0 {
				fmt.Fprintln(cmd.OutOrStdout(), "No capacity configured.")
				return nil
			}
			tw := newTable(cmd.OutOrStdout())
			row(tw, "ZONE", "MACHINE TYPE", "TYPE", "RESERVATION", "TOTAL", "IN USE", "FREE")
			for _, p := range resp.GetPools() {
				row(tw, p.GetZone(), p.GetMachineType(), capacityType(p.GetType()), shortName(p.GetReservation()),
					strconv.Itoa(int(p.GetTotal())), strconv.Itoa(int(p.GetInUse())), strconv.Itoa(int(p.GetFree())))
			}
			return tw.Flush()
		},
	}
}

func (a *app) listCapacity(ctx context.Context, cl loomv1.ReservationServiceClient) (*loomv1.ListCapacityResponse, error) {
	resp := &loomv1.ListCapacityResponse{}
	err := paging.Each(func(token string) (string, error) {
		cctx, cancel := a.call(ctx)
		defer cancel()
		page, err := cl.ListCapacity(cctx, &loomv1.ListCapacityRequest{Parent: a.parent(), PageToken: token})
		resp.Pools = append(resp.Pools, page.GetPools()...)
		return page.GetNextPageToken(), err
	})
	if err != nil {
		return nil, a.explain("list capacity", err)
	}
	return resp, nil
}
