package cloudevent

// The bridge's Pub/Sub client and its fake are pinned here so that the
// module's requirements hold them before the transports use them.
import (
	_ "cloud.google.com/go/pubsub/v2"
	_ "cloud.google.com/go/pubsub/v2/pstest"
)
