package cli

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	loomv1 "github.com/loom-ml/loom/proto/loom/v1"
)

// loom ingress: what came in through Pub/Sub and Kafka (docs/integration.md),
// per producer and per message, from IngressService (the bridge's records,
// served by the gateway to the project's viewers).

// ingressTypePrefix starts every ingress message type; the tables and
// --type take the rest ("SubmitJob").
const ingressTypePrefix = "loom.ingress.v1."

// ingressReasonWidth bounds the REASON columns; --output json has it whole.
const ingressReasonWidth = 80

// ingressOutcomes are the outcomes a message is decided with.
var ingressOutcomes = []string{"ACCEPTED", "REFUSED", "INVALID", "FAILED"}

func (a *app) ingressClient() (loomv1.IngressServiceClient, error) {
	c, err := a.client()
	if err != nil {
		return nil, err
	}
	return loomv1.NewIngressServiceClient(c), nil
}

// ingressScope are the flags both subcommands take: which project(s) and
// how many rows.
type ingressScope struct {
	all   bool
	limit int
}

func (s *ingressScope) register(cmd *cobra.Command) {
	cmd.Flags().BoolVar(&s.all, "all-projects", false, "every project's (cluster administrators; also --project -)")
	cmd.Flags().IntVar(&s.limit, "limit", 0, "show at most this many rows (0: all)")
}

// parent is the request's parent (--limit is checked by collect).
func (s *ingressScope) parent(a *app) (string, error) {
	if s.all || a.project == "-" {
		return "projects/-", nil
	}
	return a.parent(), nil
}

func (a *app) ingressCommand() *cobra.Command {
	producers := a.ingressProducersCommand()
	cmd := &cobra.Command{
		Use:   "ingress [producers|messages]",
		Short: "Show what came in through Pub/Sub and Kafka: per producer, and what was refused and why",
		Long: `Show what other systems sent Loom through Pub/Sub and Kafka (see
docs/integration.md): per producer (its CloudEvents source and the principal
its credential proved) how many messages were received, accepted, refused,
invalid or failed, and the last refusal's reason; or the recent messages
themselves with their outcome and reason. A project's viewers read its own;
cluster administrators every project's with --all-projects.

  loom ingress                      # producers (the default)
  loom ingress messages --outcome REFUSED
  loom ingress messages --source //pipelines/etl --type SubmitJob -o json`,
		Args: cobra.NoArgs,
		RunE: producers.RunE,
	}
	// "loom ingress" alone is "loom ingress producers", flags included.
	cmd.Flags().AddFlagSet(producers.Flags())
	cmd.AddCommand(producers, a.ingressMessagesCommand())
	return cmd
}

func (a *app) ingressProducersCommand() *cobra.Command {
	var scope ingressScope
	cmd := &cobra.Command{
		Use:   "producers [--all-projects] [--limit N]",
		Short: "List the producers that sent messages, with their counts (the default)",
		Long: `List the producers that sent messages: SOURCE (the CloudEvents source),
PRINCIPAL (whom its credential proved), RECEIVED (distinct messages),
ACCEPTED, REFUSED (the credential may not do it, or a quota), INVALID (bad
JSON, an unknown type, a field out of bounds), FAILED (Loom could not
apply it), DUPLICATES (redeliveries of messages already decided), LAST
(when its last message came) and LAST REASON (its last refusal's).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			parent, err := scope.parent(a)
			if err != nil {
				return err
			}
			cl, err := a.ingressClient()
			if err != nil {
				return err
			}
			req := &loomv1.ListIngressProducersRequest{Parent: parent}
			resp := &loomv1.ListIngressProducersResponse{}
			resp.Producers, err = collect(a, cmd, scope.limit, func(ctx context.Context, token string, size int32) ([]*loomv1.IngressProducer, string, error) {
				req.PageToken, req.PageSize = token, size
				page, err := cl.ListIngressProducers(ctx, req)
				return page.GetProducers(), page.GetNextPageToken(), err
			})
			if err != nil {
				return a.explain("list the ingress producers of "+parent, err)
			}
			if a.output == "json" {
				return writeJSON(cmd.OutOrStdout(), resp)
			}
			if len(resp.GetProducers()) == 0 {
				fmt.Fprintf(cmd.OutOrStdout(), "No messages came in for %s yet. Produce one to Pub/Sub or Kafka as docs/integration.md shows.\n", parent)
				return nil
			}
			return renderIngressProducers(cmd.OutOrStdout(), resp.GetProducers(), a.now(), parent == "projects/-")
		},
	}
	scope.register(cmd)
	return cmd
}

func (a *app) ingressMessagesCommand() *cobra.Command {
	var scope ingressScope
	var outcome, source, typ, principal string
	cmd := &cobra.Command{
		Use:   "messages [--outcome REFUSED] [--source S] [--type T] [--principal P] [--all-projects] [--limit N]",
		Short: "List recent ingress messages, newest first, with their outcome and reason",
		Long: `List the recent messages that came in, newest first (the bridge keeps the
last ones of each project): RECEIVED, ID and SOURCE (together the message's
idempotency key), TYPE (without "loom.ingress.v1."), OUTCOME (ACCEPTED,
REFUSED, INVALID, FAILED), CODE (the gRPC code of the decision), RESOURCE
(what it made or touched), DELIVERIES (how often it arrived) and REASON.
Refused and invalid messages are also in the dead letters, with the same
reason (docs/integration.md).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			parent, err := scope.parent(a)
			if err != nil {
				return err
			}
			filter, err := ingressFilter(outcome, source, typ, principal)
			if err != nil {
				return err
			}
			cl, err := a.ingressClient()
			if err != nil {
				return err
			}
			req := &loomv1.ListIngressMessagesRequest{Parent: parent, Filter: filter}
			resp := &loomv1.ListIngressMessagesResponse{}
			resp.Messages, err = collect(a, cmd, scope.limit, func(ctx context.Context, token string, size int32) ([]*loomv1.IngressMessage, string, error) {
				req.PageToken, req.PageSize = token, size
				page, err := cl.ListIngressMessages(ctx, req)
				return page.GetMessages(), page.GetNextPageToken(), err
			})
			if err != nil {
				return a.explain("list the ingress messages of "+parent, err)
			}
			if a.output == "json" {
				return writeJSON(cmd.OutOrStdout(), resp)
			}
			if len(resp.GetMessages()) == 0 {
				if filter != "" {
					fmt.Fprintf(cmd.OutOrStdout(), "No ingress messages of %s match %s.\n", parent, filter)
					return nil
				}
				fmt.Fprintf(cmd.OutOrStdout(), "No messages came in for %s yet. Produce one to Pub/Sub or Kafka as docs/integration.md shows.\n", parent)
				return nil
			}
			return renderIngressMessages(cmd.OutOrStdout(), resp.GetMessages(), parent == "projects/-")
		},
	}
	f := cmd.Flags()
	f.StringVar(&outcome, "outcome", "", "only this outcome: "+strings.Join(ingressOutcomes, ", "))
	f.StringVar(&source, "source", "", "only this producer's messages (its CloudEvents source)")
	f.StringVar(&typ, "type", "", `only this type: "SubmitJob" or "loom.ingress.v1.SubmitJob"`)
	f.StringVar(&principal, "principal", "", `only the messages whose credential proved this principal ("users/ana")`)
	scope.register(cmd)
	return cmd
}

// ingressFilter is ListIngressMessages' filter (AIP-160, AND only) of the
// flags that are set: outcome upper-cased and checked, a short type given
// its prefix. Values are quoted, so a source with spaces or quotes stays
// one value.
func ingressFilter(outcome, source, typ, principal string) (string, error) {
	var terms []string
	if outcome != "" {
		o := strings.ToUpper(strings.TrimSpace(outcome))
		known := false
		for _, k := range ingressOutcomes {
			known = known || k == o
		}
		if !known {
			return "", usagef("--outcome must be one of %s, got %q", strings.Join(ingressOutcomes, ", "), outcome)
		}
		terms = append(terms, "outcome = "+strconv.Quote(o))
	}
	if source != "" {
		terms = append(terms, "source = "+strconv.Quote(source))
	}
	if typ != "" {
		if !strings.Contains(typ, ".") {
			typ = ingressTypePrefix + typ
		}
		terms = append(terms, "type = "+strconv.Quote(typ))
	}
	if principal != "" {
		terms = append(terms, "principal = "+strconv.Quote(principal))
	}
	return strings.Join(terms, " AND "), nil
}

// renderIngressProducers prints producers as an aligned table, the
// project column only for every project's.
func renderIngressProducers(w io.Writer, ps []*loomv1.IngressProducer, now time.Time, withProject bool) error {
	tw := newTable(w)
	head := []string{"SOURCE", "PRINCIPAL", "RECEIVED", "ACCEPTED", "REFUSED", "INVALID", "FAILED", "DUPLICATES", "LAST", "LAST REASON"}
	if withProject {
		head = append([]string{"PROJECT"}, head...)
	}
	row(tw, head...)
	n := func(v int64) string { return strconv.FormatInt(v, 10) }
	for _, p := range ps {
		cols := []string{shown(p.GetSource()), p.GetPrincipal(), n(p.GetReceived()), n(p.GetAccepted()), n(p.GetRefused()),
			n(p.GetInvalid()), n(p.GetFailed()), n(p.GetDuplicates()), age(p.GetLastTime(), now),
			cellText(p.GetLastReason(), ingressReasonWidth)}
		if withProject {
			cols = append([]string{p.GetProject()}, cols...)
		}
		row(tw, cols...)
	}
	return tw.Flush()
}

// renderIngressMessages prints messages as an aligned table, the project
// column only for every project's.
func renderIngressMessages(w io.Writer, ms []*loomv1.IngressMessage, withProject bool) error {
	tw := newTable(w)
	head := []string{"RECEIVED", "ID", "SOURCE", "TYPE", "OUTCOME", "CODE", "RESOURCE", "DELIVERIES", "REASON"}
	if withProject {
		head = append([]string{head[0], "PROJECT"}, head[1:]...)
	}
	row(tw, head...)
	for _, m := range ms {
		received := "-"
		if m.GetReceivedTime() != nil {
			received = m.GetReceivedTime().AsTime().UTC().Format(time.RFC3339)
		}
		cols := []string{received, cellText(m.GetId(), 40), cellText(m.GetSource(), 40),
			strings.TrimPrefix(shown(m.GetType()), ingressTypePrefix), m.GetOutcome(), m.GetCode(), m.GetResource(),
			strconv.FormatInt(m.GetDeliveries(), 10), cellText(m.GetReason(), ingressReasonWidth)}
		if withProject {
			cols = append([]string{cols[0], m.GetProject()}, cols[1:]...)
		}
		row(tw, cols...)
	}
	return tw.Flush()
}
