package cli

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc/codes"

	"github.com/loom-ml/loom/libs/resname"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// operationsCommand is `loom operations`: the project's long-running
// operations (cluster creates, updates and deletes, reservations, model
// exports and uploads), listed, read, waited on and cancelled.
func (a *app) operationsCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:     "operations",
		Aliases: []string{"operation", "ops"},
		Short:   "List, inspect, wait for and cancel long-running operations",
		Long: `Long-running operations are what cluster creates, updates and deletes,
reservations, model exports and uploads answer at once; they finish later.

  loom operations list --filter "done=false"
  loom operations get 01J...
  loom operations wait 01J...
  loom operations cancel 01J...   (a cluster create: the cluster is deleted)

NAME is an operation id (in --project) or its full name.`,
	}
	cmd.AddCommand(a.operationsListCommand(), a.operationsGetCommand(), a.operationsWaitCommand(), a.operationsCancelCommand())
	return cmd
}

// operationName expands an operation id with the project.
func (a *app) operationName(s string) string {
	return fullName(s, func(id string) fmt.Stringer { return resname.Operation{Project: a.project, ID: id} })
}

func (a *app) operationsListCommand() *cobra.Command {
	var (
		filter  string
		pending bool
		limit   int
	)
	cmd := &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List the project's operations, oldest first",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if limit < 0 {
				return usagef("--limit must not be negative, got %d", limit)
			}
			if pending {
				filter = strings.TrimSpace(strings.Join([]string{"done=false", parenthesized(filter)}, " "))
			}
			ops, err := a.operations()
			if err != nil {
				return err
			}
			items, err := collect(a, cmd, limit, func(ctx context.Context, token string, size int32) ([]*loomv1.Operation, string, error) {
				resp, err := ops.ListOperations(ctx, &loomv1.ListOperationsRequest{Parent: a.parent(), Filter: filter, PageToken: token, PageSize: size})
				return resp.GetOperations(), resp.GetNextPageToken(), err
			})
			if err != nil {
				return a.explain("list operations", err)
			}
			if a.output == "json" {
				return writeJSON(cmd.OutOrStdout(), &loomv1.ListOperationsResponse{Operations: items})
			}
			if len(items) == 0 {
				if filter != "" {
					fmt.Fprintf(cmd.OutOrStdout(), "No operations in project %s match %q.\n", a.project, filter)
				} else {
					fmt.Fprintf(cmd.OutOrStdout(), "No operations in project %s yet. Creating, resizing or deleting a cluster starts one.\n", a.project)
				}
				return nil
			}
			return renderOperations(cmd.OutOrStdout(), items, a.now())
		},
	}
	cmd.Flags().StringVar(&filter, "filter", "", `AIP-160 filter over done, verb and target, e.g. "verb=create AND done=false"`)
	cmd.Flags().BoolVar(&pending, "pending", false, "only operations that are not done (adds done=false to --filter)")
	cmd.Flags().IntVar(&limit, "limit", 0, "show at most this many operations (0: all)")
	return cmd
}

// parenthesized wraps a non-empty filter so that it can be ANDed.
func parenthesized(f string) string {
	if strings.TrimSpace(f) == "" {
		return ""
	}
	return "(" + f + ")"
}

func (a *app) getOperation(ctx context.Context, arg string) (*loomv1.Operation, error) {
	ops, err := a.operations()
	if err != nil {
		return nil, err
	}
	cctx, cancel := a.call(ctx)
	defer cancel()
	name := a.operationName(arg)
	op, err := ops.GetOperation(cctx, &loomv1.GetOperationRequest{Name: name})
	if err != nil {
		return nil, a.notFoundHint(a.explain("get operation "+shortName(name), err), err, "loom operations list")
	}
	return op, nil
}

func (a *app) operationsGetCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "get NAME",
		Short: "Show an operation: what it acts on, how far it got, how it ended",
		Args:  exactArgs(1, "the operation, e.g. `loom operations get 01J...` (see `loom operations list`)"),
		RunE: func(cmd *cobra.Command, args []string) error {
			op, err := a.getOperation(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if a.output == "json" {
				return writeJSON(cmd.OutOrStdout(), op)
			}
			return renderOperation(cmd.OutOrStdout(), op, a.now())
		},
	}
}

func (a *app) operationsWaitCommand() *cobra.Command {
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "wait NAME",
		Short: "Wait for an operation to finish, showing its progress",
		Long: `Wait for an operation to finish, showing its progress. The exit status is 0
when it succeeded, 1 when it failed or was cancelled (its error is printed),
or when --timeout passed first (the operation goes on).`,
		Args: exactArgs(1, "the operation, e.g. `loom operations wait 01J...` (see `loom operations list`)"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if timeout < 0 {
				return usagef("--timeout must not be negative, got %s", timeout)
			}
			ctx := cmd.Context()
			if timeout > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, timeout)
				defer cancel()
				cmd.SetContext(ctx)
			}
			op, err := a.getOperation(ctx, args[0])
			if err != nil {
				return err
			}
			id := shortName(op.GetName())
			return a.followOperation(cmd, op, opView{
				title: "Waiting for " + describeOperation(op), // followOperation adds "(operation ID)"
				what:  "wait for operation " + id,
				final: func(op *loomv1.Operation, took time.Duration) string {
					return fmt.Sprintf("Operation %s done (%s): %s", id, elapsed(took), describeOperation(op))
				},
			})
		},
	}
	cmd.Flags().DurationVar(&timeout, "timeout", 0, "stop waiting after this long, e.g. 10m (0: until it is done)")
	return cmd
}

func (a *app) operationsCancelCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "cancel NAME",
		Short: "Cancel an operation (a cluster create: the cluster is deleted)",
		Long: `Cancel an operation that is not done. Only a cluster create can be
cancelled: it ends as CANCELLED and the cluster is deleted, even in the
middle of the create, by a new delete operation. Other operations cannot be
cancelled; the error says what to do instead.`,
		Args: exactArgs(1, "the operation, e.g. `loom operations cancel 01J...` (see `loom operations list --pending`)"),
		RunE: func(cmd *cobra.Command, args []string) error {
			ops, err := a.operations()
			if err != nil {
				return err
			}
			name := a.operationName(args[0])
			ctx, cancel := a.call(cmd.Context())
			defer cancel()
			op, err := ops.CancelOperation(ctx, &loomv1.CancelOperationRequest{Name: name})
			if err != nil {
				if codeOf(err) == codes.FailedPrecondition {
					return &explained{msg: fmt.Sprintf("cancel operation %s: %s", shortName(name), statusMessage(err)), cause: err}
				}
				return a.notFoundHint(a.explain("cancel operation "+shortName(name), err), err, "loom operations list")
			}
			if a.output == "json" {
				return writeJSON(cmd.OutOrStdout(), op)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "Operation %s cancelled: %s\n", shortName(op.GetName()), op.GetError().GetMessage())
			if del := deleteOperationIn(op.GetError().GetMessage()); del != "" {
				fmt.Fprintf(cmd.OutOrStdout(), "Follow the delete with `loom operations wait %s`.\n", a.shortIn(del))
			}
			return nil
		},
	}
}

// deleteOperationIn finds the operation name a cancelled create's message
// names ("... being deleted by operation projects/p/operations/ID").
func deleteOperationIn(msg string) string {
	const mark = "by operation "
	i := strings.LastIndex(msg, mark)
	if i < 0 {
		return ""
	}
	return strings.Fields(msg[i+len(mark):] + " ")[0]
}

// describeOperation is "create cluster demo" with how it stands.
func describeOperation(op *loomv1.Operation) string {
	md := op.GetMetadata()
	return strings.TrimSpace(md.GetVerb() + " " + targetLabel(md.GetTarget()))
}

// targetLabel is a target as "cluster demo" for the kinds the CLI knows,
// else the name as it is.
func targetLabel(target string) string {
	parts := strings.Split(target, "/")
	if len(parts) >= 4 && parts[0] == "projects" {
		kind := strings.TrimSuffix(parts[len(parts)-2], "s")
		return kind + " " + parts[len(parts)-1]
	}
	return target
}

// operationStatus is RUNNING, DONE, CANCELLED or FAILED (CODE).
func operationStatus(op *loomv1.Operation) string {
	switch e := op.GetError(); {
	case !op.GetDone():
		return "RUNNING"
	case e == nil:
		return "DONE"
	case codes.Code(e.GetCode()) == codes.Canceled:
		return "CANCELLED"
	default:
		return "FAILED (" + codes.Code(e.GetCode()).String() + ")"
	}
}

// renderOperations writes the operations as an aligned table.
func renderOperations(w io.Writer, ops []*loomv1.Operation, now time.Time) error {
	tw := newTable(w)
	row(tw, "OPERATION", "VERB", "TARGET", "STATUS", "PROGRESS", "AGE")
	for _, op := range ops {
		md := op.GetMetadata()
		row(tw, shortName(op.GetName()), md.GetVerb(), targetLabel(md.GetTarget()), operationStatus(op), md.GetProgress(), age(md.GetCreateTime(), now))
	}
	return tw.Flush()
}

// renderOperation writes one operation as aligned fields.
func renderOperation(w io.Writer, op *loomv1.Operation, now time.Time) error {
	md := op.GetMetadata()
	tw := newTable(w)
	fmt.Fprintf(tw, "Name:\t%s\n", op.GetName())
	fmt.Fprintf(tw, "Verb:\t%s\n", md.GetVerb())
	fmt.Fprintf(tw, "Target:\t%s\n", md.GetTarget())
	fmt.Fprintf(tw, "Status:\t%s\n", operationStatus(op))
	fmt.Fprintf(tw, "Progress:\t%s\n", orDash(md.GetProgress()))
	fmt.Fprintf(tw, "Started:\t%s\n", ago(md.GetCreateTime(), now))
	if md.GetEndTime() != nil {
		fmt.Fprintf(tw, "Ended:\t%s\n", ago(md.GetEndTime(), now))
	}
	if e := op.GetError(); e != nil {
		fmt.Fprintf(tw, "Error:\t%s: %s\n", codes.Code(e.GetCode()), e.GetMessage())
	}
	if !op.GetDone() {
		fmt.Fprintf(tw, "\t(wait for it with `loom operations wait %s`)\n", shortName(op.GetName()))
	}
	return tw.Flush()
}
