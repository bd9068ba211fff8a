package cli

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/loom-ml/loom/libs/resname"
	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

func (a *app) audit() (loomv1.AuditServiceClient, error) {
	c, err := a.client()
	if err != nil {
		return nil, err
	}
	return loomv1.NewAuditServiceClient(c), nil
}

// auditReasonWidth bounds the REASON column; --output json has it whole.
const auditReasonWidth = 80

func (a *app) auditCommand() *cobra.Command {
	var principal string
	var all bool
	var limit int
	cmd := &cobra.Command{
		Use:   "audit [--principal users/NAME] [--all-projects] [--limit N]",
		Short: "Show the audit trail: mutating requests and refusals (admins only)",
		Long: `Show the project's audit trail, newest first: every mutating request and
every refusal, with its principal, method, resource, decision and code.
DECISION is allowed; denied (the caller was refused: no credential, a role
too weak, or a resource hidden from them, which they were answered
NotFound as if it were not there); rejected (the request itself was
refused, whoever asked: NotFound of what is not there, InvalidArgument,
FailedPrecondition, AlreadyExists, OutOfRange, ResourceExhausted); or
failed (a change let through that then failed).
Successful reads are not recorded. A project's admins read its trail;
cluster administrators read every project's with --all-projects
(or --project -), which also holds the calls that name no project.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cl, err := a.audit()
			if err != nil {
				return err
			}
			parent := a.parent()
			if all || a.project == "-" {
				parent = "projects/-"
			}
			req := &loomv1.ListAuditRecordsRequest{Parent: parent, Principal: principal}
			resp := &loomv1.ListAuditRecordsResponse{}
			resp.Records, err = collect(a, cmd, limit, func(ctx context.Context, token string, size int32) ([]*loomv1.AuditRecord, string, error) {
				req.PageToken, req.PageSize = token, size
				page, err := cl.ListAuditRecords(ctx, req)
				return page.GetRecords(), page.GetNextPageToken(), err
			})
			if err != nil {
				return a.explain("read the audit trail of "+parent, err)
			}
			if a.output == "json" {
				return writeJSON(cmd.OutOrStdout(), resp)
			}
			if len(resp.GetRecords()) == 0 {
				fmt.Fprintln(cmd.OutOrStdout(), "No audit records.")
				return nil
			}
			return renderAudit(cmd.OutOrStdout(), resp.GetRecords(), parent == "projects/-")
		},
	}
	cmd.Flags().StringVar(&principal, "principal", "", `only this principal's records ("users/ana", "nodes/gpu-0001", "anonymous")`)
	cmd.Flags().BoolVar(&all, "all-projects", false, "every project's records (cluster administrators)")
	cmd.Flags().IntVar(&limit, "limit", 0, "show at most this many records, the newest first (0: all)")
	return cmd
}

// renderAudit prints records as an aligned table, the project column only
// for every project's trail.
func renderAudit(w io.Writer, recs []*loomv1.AuditRecord, withProject bool) error {
	tw := newTable(w)
	head := []string{"TIME", "PRINCIPAL", "METHOD", "RESOURCE", "DECISION", "CODE", "REASON"}
	if withProject {
		head = append([]string{head[0], "PROJECT"}, head[1:]...)
	}
	row(tw, head...)
	for _, r := range recs {
		// Every column through shown: a record's resource is the name
		// the caller sent, as sent (a stranger's refused call is
		// recorded too), and its reason may echo it; an escape sequence
		// there must not act on the terminal of the admin who reads it.
		cols := []string{r.GetTime().AsTime().UTC().Format(time.RFC3339), shown(r.GetPrincipal()),
			shown(strings.TrimPrefix(r.GetMethod(), "/loom.v1.")), shown(auditResource(r)), shown(r.GetDecision()),
			shown(r.GetCode()), cell(r.GetReason(), auditReasonWidth)}
		if withProject {
			cols = append([]string{cols[0], shown(r.GetProject())}, cols[1:]...)
		}
		row(tw, cols...)
	}
	return tw.Flush()
}

// auditResource is the record's resource without its project prefix,
// which the table's project says.
func auditResource(r *loomv1.AuditRecord) string {
	if r.GetProject() != "" && r.GetProject() != "-" {
		p := resname.Project{ID: r.GetProject()}.String()
		if rest, ok := strings.CutPrefix(r.GetResource(), p+"/"); ok {
			return rest
		}
	}
	return r.GetResource()
}
