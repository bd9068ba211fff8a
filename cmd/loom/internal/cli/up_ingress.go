package cli

import (
	"fmt"
	"io"

	"github.com/loom-ml/loom/cmd/loom/stack"
	"github.com/loom-ml/loom/libs/embedded"
	"github.com/loom-ml/loom/libs/topics"
)

// printIngress tells the user of `loom up` where other systems send their
// CloudEvents (docs/integration.md) and where the dead letters and public
// events come out, two aligned rows per transport.
func printIngress(w io.Writer, st *stack.Stack) {
	fmt.Fprintln(w, "Other systems send CloudEvents to Loom (docs/integration.md):")
	tw := newTable(w)
	fmt.Fprintf(tw, "  Kafka\tbroker %s, topic %s\n", st.BrokerAddr, topics.Ingress)
	fmt.Fprintf(tw, "  \tdead letters %s, public events %s\n", topics.Ingress+".dlq", topics.Public)
	fmt.Fprintf(tw, "  Pub/Sub\tPUBSUB_EMULATOR_HOST=%s, project %s, topic %s\n",
		st.PubSubAddr, embedded.PubSubProject, embedded.PubSubIngressTopic)
	fmt.Fprintf(tw, "  \tdead letters %s, public events %s (subscriptions of the same names; kept in memory only)\n",
		embedded.PubSubDeadLetterTopic, embedded.PubSubEventsTopic)
	fmt.Fprintf(tw, "  \tgcloud: CLOUDSDK_API_ENDPOINT_OVERRIDES_PUBSUB=http://%s/ (publish only)\n", st.PubSubRESTAddr)
	_ = tw.Flush()
}
