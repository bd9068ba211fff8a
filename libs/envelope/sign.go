package envelope

import (
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/segmentio/kafka-go"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/loom-ml/loom/libs/auth"
	eventsv1 "github.com/loom-ml/loom/proto/loom/events/v1"
)

// Headers of a signed record. The signature covers the record's identity
// (id, type, source, subject, time, key, topic, principal), its signer and
// certificate, and its payload bytes (canonical), so that none of them can
// be changed or moved to another topic without the signature failing.
const (
	// HeaderSigner names who signed: "services/<name>" or "nodes/<node>".
	HeaderSigner = "loom_signer"
	// HeaderCert is a node signer's certificate (auth.NodeCert, signed by
	// the services' key); absent for a service signer.
	HeaderCert = "loom_cert"
	// HeaderSig is the Ed25519 signature, base64 (raw URL encoding).
	HeaderSig = "loom_sig"
)

// ErrRejected is wrapped by every verification failure (a *Rejection): the
// record was not signed by whom it must be, and can never be handled.
var ErrRejected = errors.New("event refused")

// Reasons a record is refused (Rejection.Reason): short, stable words that
// the dead-letter header and the rejection metric carry.
const (
	ReasonUnsigned      = "unsigned"
	ReasonBadSignature  = "bad-signature"
	ReasonBadCert       = "bad-certificate"
	ReasonExpiredCert   = "expired-certificate"
	ReasonUnknownSigner = "unknown-signer"
	ReasonNotService    = "not-a-service"
	ReasonWrongNode     = "wrong-node"
	ReasonDuplicate     = "duplicate-header"
	// ReasonNotAssigned: a node reported on a step the scheduler did not
	// assign to it (a consumer's own check; see Reject).
	ReasonNotAssigned = "not-assigned"
	// ReasonNoPrincipal: a command that names no one it acts as (a
	// CancelJob with neither user nor on_behalf_of) from a sender not
	// trusted to send one (the scheduler's own check; see Reject): the
	// scheduler would otherwise hold it to no owner's jobs.
	ReasonNoPrincipal = "no-principal"
	// ReasonWrongSender: a record of a type only some services send (a
	// command a node runs, a repair's answer, a command to a service),
	// signed by another service (Senders).
	ReasonWrongSender = "wrong-sender"
	// ReasonWrongKey: a node's record whose Kafka key is not the one its
	// type is keyed by (NodeEventTypes): the producer places a record by
	// its key, so a node choosing another key chooses another partition.
	ReasonWrongKey = "wrong-key"
	// ReasonWrongPartition: a node's record on a partition its key does not
	// go to (a verifying consumer's own check, libs/bus: the producer
	// chooses the partition, and the partition count is the broker's).
	ReasonWrongPartition = "wrong-partition"
	// ReasonRevoked: a node's record signed with an identity revoked when
	// the provisioner removed the node (Verifier.SetRevocations).
	ReasonRevoked = "revoked"
)

// Rejection is why a record was refused: Reason is one of the Reason*
// words, Detail says more for the log and the dead letter.
type Rejection struct {
	Reason, Detail string
}

// Error implements error.
func (r *Rejection) Error() string {
	return fmt.Sprintf("%v (%s): %s", ErrRejected, r.Reason, r.Detail)
}

// Unwrap makes errors.Is(err, ErrRejected) true.
func (r *Rejection) Unwrap() error { return ErrRejected }

// Reject returns a *Rejection: for a consumer's own checks of who may say
// what (the scheduler's of which node runs a step), so that the record is
// dead-lettered with the reason as a refused signature is (wrap it with
// bus.Permanent).
func Reject(reason, format string, args ...any) error { return reject(reason, format, args...) }

func reject(reason, format string, args ...any) error {
	return &Rejection{Reason: reason, Detail: fmt.Sprintf(format, args...)}
}

// ReasonOf returns the Reason of the Rejection err wraps, or "".
func ReasonOf(err error) string {
	var r *Rejection
	if errors.As(err, &r) {
		return r.Reason
	}
	return ""
}

// Signer signs the records a service or a node writes. It is immutable; a
// node that renews its identity makes a new one.
type Signer struct {
	name string
	key  ed25519.PrivateKey
	cert []byte
}

// NewServiceSigner returns the signer of service (its name without
// "services/"), with the services' key (auth.ServiceKey).
func NewServiceSigner(service string, key ed25519.PrivateKey) *Signer {
	return &Signer{name: auth.ServiceName(service), key: key}
}

// NewNodeSigner returns the signer of a node: its own key and the
// certificate (auth.SignNodeCert) that binds the key's public half to the
// node. The signer's name is auth.NodeName of the certificate's node.
func NewNodeSigner(key ed25519.PrivateKey, cert []byte) (*Signer, error) {
	// The node's name is read back from the certificate without checking
	// it (the signer cannot check its own certificate without the
	// services' public key); consumers check it.
	nc, err := peekCert(cert)
	if err != nil {
		return nil, err
	}
	return &Signer{name: auth.NodeName(nc.Node), key: key, cert: append([]byte(nil), cert...)}, nil
}

// Name is the signer's name ("services/<name>" or "nodes/<node>").
func (s *Signer) Name() string { return s.name }

// Sign sets m's signature headers (replacing any it has) over m as it is
// now: m must have its topic, key, value and CloudEvents headers.
func (s *Signer) Sign(m *kafka.Message) {
	headers := m.Headers[:0:0]
	for _, h := range m.Headers {
		switch h.Key {
		case HeaderSigner, HeaderCert, HeaderSig:
			continue
		}
		headers = append(headers, h)
	}
	headers = append(headers, kafka.Header{Key: HeaderSigner, Value: []byte(s.name)})
	if s.cert != nil {
		headers = append(headers, kafka.Header{Key: HeaderCert, Value: s.cert})
	}
	m.Headers = headers
	f, _ := fieldsOf(*m)
	sig := ed25519.Sign(s.key, f.canonical(m.Topic, m.Key, m.Value))
	m.Headers = append(m.Headers, kafka.Header{Key: HeaderSig, Value: []byte(base64.RawURLEncoding.EncodeToString(sig))})
}

// SignerRef holds the signer a producer uses now; a node that renews its
// identity swaps it without stopping its writes. The zero value holds none.
type SignerRef struct{ p atomic.Pointer[Signer] }

// Set makes s the signer from now on.
func (r *SignerRef) Set(s *Signer) { r.p.Store(s) }

// Get returns the signer now (nil: none).
func (r *SignerRef) Get() *Signer { return r.p.Load() }

// signedFields are the headers a signature covers, as the record has them.
type signedFields struct {
	id, typ, source, subject, time, principal, signer string
	cert, sig                                         []byte
}

// fieldsOf reads m's signed headers. A record with one of them twice is
// refused: a consumer must not read one copy while the signature covers the
// other.
func fieldsOf(m kafka.Message) (signedFields, error) {
	var f signedFields
	var seen [9]bool
	for _, h := range m.Headers {
		i := -1
		switch h.Key {
		case HeaderID:
			i, f.id = 0, string(h.Value)
		case HeaderType:
			i, f.typ = 1, string(h.Value)
		case HeaderSource:
			i, f.source = 2, string(h.Value)
		case HeaderSubject:
			i, f.subject = 3, string(h.Value)
		case HeaderTime:
			i, f.time = 4, string(h.Value)
		case HeaderPrincipal:
			i, f.principal = 5, string(h.Value)
		case HeaderSigner:
			i, f.signer = 6, string(h.Value)
		case HeaderCert:
			i, f.cert = 7, h.Value
		case HeaderSig:
			i, f.sig = 8, h.Value
		}
		if i >= 0 {
			if seen[i] {
				return f, reject(ReasonDuplicate, "header %s appears more than once", h.Key)
			}
			seen[i] = true
		}
	}
	return f, nil
}

// sigContext starts every signed message, so that a Loom event signature
// can never be taken for a signature of anything else.
const sigContext = "loom event signature v1\x00"

// canonical is what the signature covers: each field length-prefixed, in a
// fixed order.
func (f signedFields) canonical(topic string, key, value []byte) []byte {
	n := len(sigContext) + len(f.id) + len(f.typ) + len(f.source) + len(f.subject) + len(f.time) +
		len(key) + len(topic) + len(f.principal) + len(f.signer) + len(f.cert) + len(value) + 11*binary.MaxVarintLen64
	b := make([]byte, 0, n)
	b = append(b, sigContext...)
	for _, s := range [][]byte{[]byte(f.id), []byte(f.typ), []byte(f.source), []byte(f.subject), []byte(f.time),
		key, []byte(topic), []byte(f.principal), []byte(f.signer), f.cert, value} {
		b = binary.AppendUvarint(b, uint64(len(s)))
		b = append(b, s...)
	}
	return b
}

// Identity is a verified signer.
type Identity struct {
	// Name is "services/<name>" or "nodes/<node>".
	Name string
	// Node, Cluster and Pool are a node signer's, from its certificate;
	// Reg its registration (auth.NodeCert.Reg).
	Node, Cluster, Pool, Reg string
}

// IsService reports whether the signer is a service.
func (id Identity) IsService() bool { return strings.HasPrefix(id.Name, "services/") }

// Policy says whose records a consumer accepts.
type Policy uint8

const (
	// AcceptNodeEvents accepts records signed by a service, and records
	// signed by a node of the types nodes write (NodeEventTypes) whose
	// payload names that node.
	AcceptNodeEvents Policy = iota
	// ServicesOnly accepts records signed by a service only: commands.
	ServicesOnly
)

// NodeEventTypes are the event types an agent writes: the only ones a node
// signature is accepted for. Each has a "node" field that must name the
// signing node. The value is the payload field whose value the record's
// Kafka key must be (the agent's routing: services/agent adapters.Event,
// Node.nodeEvent): "node" for the node's own reports, "job" for its step
// events, which are ordered by job. A node's record keyed otherwise is
// refused (ReasonWrongKey): the key decides the partition, and a node that
// could choose it could write to every partition of the topic.
var NodeEventTypes = map[string]protoreflect.Name{
	TypeOf(&eventsv1.StepChanged{}):     "job",
	TypeOf(&eventsv1.TasksChanged{}):    "job",
	TypeOf(&eventsv1.AgentRegistered{}): "node",
	TypeOf(&eventsv1.Heartbeat{}):       "node",
	TypeOf(&eventsv1.GpuTelemetry{}):    "node",
	TypeOf(&eventsv1.XidObserved{}):     "node",
	// HealthCheckCompleted names its node in result.node.
	TypeOf(&eventsv1.HealthCheckCompleted{}): "node",
	TypeOf(&eventsv1.StepProgress{}):         "job",
	TypeOf(&eventsv1.MetricsReported{}):      "job",
	TypeOf(&eventsv1.UsageReported{}):        "job",
}

// NodeRecordKey is the Kafka key a record of e's type signed by node must
// have (NodeEventTypes): node itself, or e's job; ok is false for a type a
// node does not write.
func NodeRecordKey(e Event, node string) (key string, ok bool) {
	switch NodeEventTypes[e.Type] {
	case "node":
		return node, true
	case "job":
		return payloadString(e.Payload, "job"), true
	}
	return "", false
}

// Senders is, for each event type that only some services send, those
// services: every service holds the same key, so a signature proves only
// that some service signed, and this table says which may. A verified
// record of one of these types signed by any other signer is refused with
// ReasonWrongSender, whatever the policy (a node's is refused before, as
// not-a-service). It is the one table of who sends what: the rows are
//   - the commands a node runs: the scheduler's step commands, health's
//     node commands (no other service may run a process as root on a
//     node);
//   - a repair's progress and answer, the provisioner's: health ends a
//     repair, or escalates it, or waits for it longer, on these (another
//     service's RemediationFinished would put back a broken node, or take a
//     sound one to a reimage; its RemediationProgress would hold a broken
//     node out of escalation);
//   - the operators' commands to health, the gateway's (it authorizes the
//     caller and names the user): another service's UpdateNodeRemediation
//     would resume or drain any node, its InjectFault break a simulated one,
//     its ScanNodes or ReportFaultyNodes take nodes out for checks or repair;
//   - the scheduler's call for checks on nodes (NodesNeedCheck), on which
//     health runs them, and its word that a node is drained (NodeDrained),
//     on which the provisioner takes the node away and health repairs it;
//   - the provisioner's nodes (NodeChanged, NodeRemoved): another service's
//     would add a node the scheduler places jobs on, or take one out of
//     every service's view;
//   - health's verdict on a node (NodeHealthChanged), on which the
//     scheduler fails the node's jobs and places none there (or puts the
//     node back in use), and its call for a repair (RemediateNode), on
//     which the provisioner reboots, reimages or replaces the node;
//   - the commands to the provisioner and the scheduler (the cluster and
//     job command topics), the gateway's, written after it authorized the
//     caller; the training service also creates and deletes the clusters
//     of its jobs and submits and cancels those jobs;
//   - the commands to training and the registry (the training and model
//     command topics), the gateway's: training turns them into jobs run as
//     the user they name, so another service's would reach the scheduler
//     through training's own row; training (a pipeline's model) and the
//     registry (its UploadModel RPC) also upload models;
//   - a node's own reports (NodeEventTypes), Nodes': the scheduler ends a
//     job's run on a StepChanged, health fails a node on a
//     HealthCheckCompleted or an XidObserved, training keeps a trial's
//     metrics. The scheduler's not-assigned check and DecodeVerified's
//     wrong-node check hold a node to its own jobs and itself, but a
//     service signer carries no node: without these rows any service could
//     end any job's run. The provisioner also sends AgentRegistered and
//     Heartbeat for the sim provider's simulated agents. Every type in
//     NodeEventTypes has a row naming Nodes, and no other row does
//     (TestSendersCoverTheNodeEvents);
//   - each service's word on what it owns, which its readers take as the
//     truth: the scheduler's on jobs and Slurm nodes (JobChanged,
//     SlurmNodeChanged: training ends a trial's run, the registry
//     registers a completed job's model, the gateway keeps the job's
//     history, the bridge publishes it); the provisioner's on clusters,
//     their operations and reservations (ClusterChanged,
//     ClusterOperationFailed, ClusterDeleted, ReservationChanged,
//     ReservationDeleted: the scheduler takes a cluster's partitions,
//     the gateway and training end an operation); the registry's on
//     models (a pipeline goes on, an upload or an export ends); training's
//     on its jobs (the gateway's change feed, the bridge's public stream);
//     the gateway's audit records (its audit log). Another service's would
//     end, fail or register what it does not own, or write the audit log.
//
// Every event type of loom.events.v1 has a row, or is listed in
// anySender with why any service may send it
// (TestSendersCoverEveryEventType): a new type cannot be forgotten. A
// type without a row is accepted from any service.
var Senders = map[string][]string{
	TypeOf(&eventsv1.StartStep{}):             {"services/scheduler"},
	TypeOf(&eventsv1.StopStep{}):              {"services/scheduler"},
	TypeOf(&eventsv1.SignalStep{}):            {"services/scheduler"},
	TypeOf(&eventsv1.LaunchTasks{}):           {"services/scheduler"},
	TypeOf(&eventsv1.KillTasks{}):             {"services/scheduler"},
	TypeOf(&eventsv1.RunHealthCheck{}):        {"services/health"},
	TypeOf(&eventsv1.InjectNodeFault{}):       {"services/health"},
	TypeOf(&eventsv1.RemediationProgress{}):   {"services/provisioner"},
	TypeOf(&eventsv1.RemediationFinished{}):   {"services/provisioner"},
	TypeOf(&eventsv1.ReportFaultyNodes{}):     {"services/gateway"},
	TypeOf(&eventsv1.UpdateNodeRemediation{}): {"services/gateway"},
	TypeOf(&eventsv1.InjectFault{}):           {"services/gateway"},
	TypeOf(&eventsv1.ScanNodes{}):             {"services/gateway"},
	TypeOf(&eventsv1.NodesNeedCheck{}):        {"services/scheduler"},
	TypeOf(&eventsv1.NodeDrained{}):           {"services/scheduler"},
	TypeOf(&eventsv1.NodeChanged{}):           {"services/provisioner"},
	TypeOf(&eventsv1.NodeRemoved{}):           {"services/provisioner"},
	TypeOf(&eventsv1.NodeHealthChanged{}):     {"services/health"},
	TypeOf(&eventsv1.RemediateNode{}):         {"services/health"},
	// The cluster commands.
	TypeOf(&eventsv1.CreateCluster{}):     {"services/gateway", "services/training"},
	TypeOf(&eventsv1.UpdateCluster{}):     {"services/gateway"},
	TypeOf(&eventsv1.DeleteCluster{}):     {"services/gateway", "services/training"},
	TypeOf(&eventsv1.CreateReservation{}): {"services/gateway"},
	TypeOf(&eventsv1.DeleteReservation{}): {"services/gateway"},
	// The job commands.
	TypeOf(&eventsv1.SubmitJob{}):          {"services/gateway", "services/training"},
	TypeOf(&eventsv1.CancelJob{}):          {"services/gateway", "services/training"},
	TypeOf(&eventsv1.UpdateJob{}):          {"services/gateway"},
	TypeOf(&eventsv1.UpdateSlurmNode{}):    {"services/gateway"},
	TypeOf(&eventsv1.CreateJobStep{}):      {"services/gateway"},
	TypeOf(&eventsv1.CancelJobStep{}):      {"services/gateway"},
	TypeOf(&eventsv1.AssociationChanged{}): {"services/gateway"},
	TypeOf(&eventsv1.AccountChanged{}):     {"services/gateway"},
	// The training commands: training submits the jobs they ask for, as
	// the user they name (a forged one would run a job as anyone through
	// training's own SubmitJob row), and an Admin cancel or delete ends
	// anyone's.
	TypeOf(&eventsv1.CreateCustomJob{}):               {"services/gateway"},
	TypeOf(&eventsv1.CreateHyperparameterTuningJob{}): {"services/gateway"},
	TypeOf(&eventsv1.CreateTrainingPipeline{}):        {"services/gateway"},
	TypeOf(&eventsv1.CancelTraining{}):                {"services/gateway"},
	TypeOf(&eventsv1.DeleteTraining{}):                {"services/gateway"},
	// The model commands: the registry writes an export's artifacts where
	// it names, and registers an upload (AnyOwner: whoever's model).
	// UploadModel also comes from a pipeline (training) and from the
	// registry's own UploadModel RPC, which it writes for itself.
	TypeOf(&eventsv1.ExportModel{}): {"services/gateway"},
	TypeOf(&eventsv1.UploadModel{}): {"services/gateway", "services/registry", "services/training"},
	// A node's reports: from its agent alone, which signs as the node;
	// the sim provider (the provisioner) registers and beats for the
	// agents it simulates.
	TypeOf(&eventsv1.StepChanged{}):          {Nodes},
	TypeOf(&eventsv1.TasksChanged{}):         {Nodes},
	TypeOf(&eventsv1.StepProgress{}):         {Nodes},
	TypeOf(&eventsv1.MetricsReported{}):      {Nodes},
	TypeOf(&eventsv1.UsageReported{}):        {Nodes},
	TypeOf(&eventsv1.HealthCheckCompleted{}): {Nodes},
	TypeOf(&eventsv1.GpuTelemetry{}):         {Nodes},
	TypeOf(&eventsv1.XidObserved{}):          {Nodes},
	TypeOf(&eventsv1.AgentRegistered{}):      {Nodes, "services/provisioner"},
	TypeOf(&eventsv1.Heartbeat{}):            {Nodes, "services/provisioner"},
	// The scheduler's jobs and Slurm nodes: training ends a trial's run,
	// and the registry registers a completed job's model, on a JobChanged.
	TypeOf(&eventsv1.JobChanged{}):       {"services/scheduler"},
	TypeOf(&eventsv1.SlurmNodeChanged{}): {"services/scheduler"},
	// The provisioner's clusters, their operations and reservations: the
	// scheduler takes a cluster's partitions from its ClusterChanged, the
	// gateway and training end an operation on these.
	TypeOf(&eventsv1.ClusterChanged{}):         {"services/provisioner"},
	TypeOf(&eventsv1.ClusterOperationFailed{}): {"services/provisioner"},
	TypeOf(&eventsv1.ClusterDeleted{}):         {"services/provisioner"},
	TypeOf(&eventsv1.ReservationChanged{}):     {"services/provisioner"},
	TypeOf(&eventsv1.ReservationDeleted{}):     {"services/provisioner"},
	// The registry's answers on models: a pipeline goes on, an upload's or
	// an export's operation ends, on these.
	TypeOf(&eventsv1.ModelVersionRegistered{}): {"services/registry"},
	TypeOf(&eventsv1.ModelUploadFailed{}):      {"services/registry"},
	TypeOf(&eventsv1.ModelExported{}):          {"services/registry"},
	TypeOf(&eventsv1.ModelExportFailed{}):      {"services/registry"},
	// Training's jobs, which the gateway's change feed and the bridge's
	// public stream carry.
	TypeOf(&eventsv1.CustomJobChanged{}):               {"services/training"},
	TypeOf(&eventsv1.HyperparameterTuningJobChanged{}): {"services/training"},
	TypeOf(&eventsv1.TrialChanged{}):                   {"services/training"},
	TypeOf(&eventsv1.TrainingPipelineChanged{}):        {"services/training"},
	// The gateway's audit records, which it keeps as the audit log: another
	// service's would write what no one did into it.
	TypeOf(&eventsv1.AuditRecorded{}): {"services/gateway"},
}

// anySender is, for each event type any service may send (it has no row in
// Senders), why no row restricts it. It is empty: every type of
// loom.events.v1 has one sender or a few. A new type goes in Senders, or
// here with its reason (TestSendersCoverEveryEventType).
var anySender = map[string]string{}

// Nodes, in a row of Senders, stands for the nodes: a record of the row's
// type signed by a node (its agent, under the node identity) is accepted,
// on a topic whose consumer takes nodes' records (AcceptNodeEvents), of the
// node it names (NodeEventTypes). A row that names no service besides is a
// type no service may send.
const Nodes = "nodes/*"

// sendersText names a row's senders for a refusal: "services/a or a node".
func sendersText(row []string) string {
	names := make([]string, len(row))
	for i, s := range row {
		names[i] = s
		if s == Nodes {
			names[i] = "a node"
		}
	}
	return strings.Join(names, " or ")
}

// MaySend reports whether the service named service ("services/<name>")
// may send a record of type typ: typ has no row in Senders, or its row
// names service. A row of Nodes alone (a node's report) names no service.
// (Whether a node may send typ is NodeEventTypes'.)
func MaySend(typ, service string) bool {
	want, ok := Senders[typ]
	return !ok || (service != Nodes && slices.Contains(want, service))
}

// maxCachedCerts bounds the verified-certificate cache: more distinct live
// certificates than this (nodes) only costs re-verification.
const maxCachedCerts = 16384

// Verifier checks records' signatures against the services' public key:
// a service's signature directly, a node's through its certificate, which
// the services' key signed. Verified certificates are cached until they
// expire, so that a node's records cost one Ed25519 verification each. It
// is safe for concurrent use.
type Verifier struct {
	pub ed25519.PublicKey
	now func() time.Time

	mu    sync.Mutex
	certs map[[32]byte]auth.NodeCert

	revoked atomic.Pointer[Revocations]
}

// Revocations looks up the revocation of a node's identities: the
// revocation of node (its full name) in force, if any (auth.NodeRevocation;
// one past its Until is ignored). It is called once per node record, so it
// must answer from memory.
type Revocations func(node string) (auth.NodeRevocation, bool)

// SetRevocations makes v refuse (ReasonRevoked) a node's record signed with
// an identity that r revokes, from the next record on. nil checks none.
func (v *Verifier) SetRevocations(r Revocations) {
	if r == nil {
		v.revoked.Store(nil)
		return
	}
	v.revoked.Store(&r)
}

// NewVerifier returns a verifier trusting the services' public key pub;
// now is the clock certificates' expiry is read on (nil: time.Now).
func NewVerifier(pub ed25519.PublicKey, now func() time.Time) *Verifier {
	if now == nil {
		now = time.Now
	}
	return &Verifier{pub: append(ed25519.PublicKey(nil), pub...), now: now, certs: map[[32]byte]auth.NodeCert{}}
}

// Verify checks m's signature and returns who signed it. Every failure is
// a *Rejection (wrapping ErrRejected); a node's record whose identity is
// revoked (ReasonRevoked, SetRevocations) is refused with its verified
// signer returned. It does not decode the payload nor
// apply a Policy: Registry.DecodeVerified does both.
func (v *Verifier) Verify(m kafka.Message) (Identity, error) {
	f, err := fieldsOf(m)
	if err != nil {
		return Identity{}, err
	}
	if f.signer == "" || len(f.sig) == 0 {
		return Identity{}, reject(ReasonUnsigned, "record has no %s/%s headers", HeaderSigner, HeaderSig)
	}
	if len(f.sig) != base64.RawURLEncoding.EncodedLen(ed25519.SignatureSize) {
		return Identity{}, reject(ReasonBadSignature, "signature of %d characters, want %d", len(f.sig), base64.RawURLEncoding.EncodedLen(ed25519.SignatureSize))
	}
	sig := make([]byte, ed25519.SignatureSize)
	if n, err := base64.RawURLEncoding.Decode(sig, f.sig); err != nil || n != ed25519.SignatureSize {
		return Identity{}, reject(ReasonBadSignature, "signature is not %d base64 bytes", ed25519.SignatureSize)
	}
	id := Identity{Name: f.signer}
	key := v.pub
	switch {
	case strings.HasPrefix(f.signer, "services/") && len(f.signer) > len("services/"):
		if f.cert != nil {
			return Identity{}, reject(ReasonBadCert, "a service signer carries no certificate")
		}
	case strings.HasPrefix(f.signer, "nodes/"):
		if f.cert == nil {
			return Identity{}, reject(ReasonBadCert, "node signer %s carries no certificate", f.signer)
		}
		c, err := v.cert(f.cert)
		if err != nil {
			return Identity{}, err
		}
		if auth.NodeName(c.Node) != f.signer {
			return Identity{}, reject(ReasonWrongNode, "signer %s carries the certificate of %s", f.signer, auth.NodeName(c.Node))
		}
		id.Node, id.Cluster, id.Pool, id.Reg = c.Node, c.Cluster, c.Pool, c.Reg
		key = c.PublicKey
	default:
		return Identity{}, reject(ReasonUnknownSigner, "signer %q is neither services/<name> nor nodes/<node>", truncate(f.signer))
	}
	if len(key) != ed25519.PublicKeySize || !ed25519.Verify(key, f.canonical(m.Topic, m.Key, m.Value), sig) {
		return Identity{}, reject(ReasonBadSignature, "signature of %s does not verify", truncate(f.signer))
	}
	// Checked once the signature holds, so that the refusal names a
	// verified signer: a consumer holds a revoked node to its rate too.
	if r := v.revoked.Load(); r != nil && id.Node != "" {
		if rev, ok := (*r)(id.Node); ok && rev.Live(v.now()) && rev.Revokes(id.Reg) {
			return id, reject(ReasonRevoked, "the identity of %s (registration %q) was revoked when the node was removed; "+
				"only registrations after %s are accepted", id.Name, truncate(id.Reg), rev.Before)
		}
	}
	return id, nil
}

// cert verifies a node certificate, from the cache when it was verified
// before and has not expired since.
func (v *Verifier) cert(raw []byte) (auth.NodeCert, error) {
	h := sha256.Sum256(raw)
	now := v.now()
	v.mu.Lock()
	c, ok := v.certs[h]
	v.mu.Unlock()
	if ok {
		if now.Before(c.NotAfter) {
			return c, nil
		}
		v.mu.Lock()
		delete(v.certs, h)
		v.mu.Unlock()
		return c, reject(ReasonExpiredCert, "certificate of %s expired at %s", c.Node, c.NotAfter.UTC().Format(time.RFC3339))
	}
	c, err := auth.VerifyNodeCert(v.pub, raw, now)
	if err != nil {
		if c.Node != "" && strings.Contains(err.Error(), "expired") {
			return c, reject(ReasonExpiredCert, "%v", err)
		}
		return c, reject(ReasonBadCert, "%v", err)
	}
	v.mu.Lock()
	if len(v.certs) >= maxCachedCerts {
		clear(v.certs)
	}
	v.certs[h] = c
	v.mu.Unlock()
	return c, nil
}

// DecodeVerified is Decode for a consumer that trusts only signed records:
// m's signature is checked first (before any parsing of its payload), then
// that a type only some services send comes from one of them (Senders), then
// policy, then, for a node's record, that its payload's node is the
// signer's. The event's Signer is the verified signer, on a refusal too
// once the signature verified (a consumer holds each node to a rate on
// what it signed, refused or not); it is empty when the signature did not.
// A refusal wraps ErrRejected (a *Rejection).
func (r *Registry) DecodeVerified(m kafka.Message, v *Verifier, policy Policy) (Event, error) {
	id, err := v.Verify(m)
	if err != nil {
		e, _ := r.headersOf(m)
		if ReasonOf(err) == ReasonRevoked {
			// Its signature verified: it counts against the node's rate.
			e.Signer, e.SignerRegistration = id.Name, id.Reg
		}
		return e, fmt.Errorf("decode %s[%d]@%d: %w", m.Topic, m.Partition, m.Offset, err)
	}
	typ := recordType(m)
	if id.IsService() && !MaySend(typ, id.Name) {
		e, _ := r.headersOf(m)
		e.Signer = id.Name
		return e, fmt.Errorf("decode %s[%d]@%d: %w", m.Topic, m.Partition, m.Offset,
			reject(ReasonWrongSender, "%s is accepted only from %s, not from %s", typ, sendersText(Senders[typ]), truncate(id.Name)))
	}
	if !id.IsService() {
		// The refused event names its verified signer, so that a
		// consumer holding each node to a rate counts these too.
		if policy == ServicesOnly {
			e, _ := r.headersOf(m)
			e.Signer, e.SignerRegistration = id.Name, id.Reg
			return e, fmt.Errorf("decode %s[%d]@%d: %w", m.Topic, m.Partition, m.Offset,
				reject(ReasonNotService, "%s is accepted only from a service, not from %s", typ, id.Name))
		}
		if _, ok := NodeEventTypes[typ]; !ok {
			e, _ := r.headersOf(m)
			e.Signer, e.SignerRegistration = id.Name, id.Reg
			return e, fmt.Errorf("decode %s[%d]@%d: %w", m.Topic, m.Partition, m.Offset,
				reject(ReasonNotService, "a node may not write %s (signed by %s)", truncate(typ), id.Name))
		}
	}
	e, err := r.Decode(m)
	e.Signer, e.SignerRegistration = id.Name, id.Reg
	if err != nil {
		return e, err
	}
	if !id.IsService() {
		if node := payloadNode(e.Payload); node != id.Node {
			return e, fmt.Errorf("decode %s (%s): %w", e.ID, e.Type,
				reject(ReasonWrongNode, "%s reports node %q but is signed by %s", e.Type, truncate(node), id.Name))
		}
		// A node speaks for its own cluster only: a payload naming another
		// (AgentRegistered's) would make it a node of that cluster.
		if cl := payloadString(e.Payload, "cluster"); cl != "" && id.Cluster != "" && cl != id.Cluster {
			return e, fmt.Errorf("decode %s (%s): %w", e.ID, e.Type,
				reject(ReasonWrongNode, "%s reports cluster %q but is signed by %s of %s", e.Type, truncate(cl), id.Name, id.Cluster))
		}
		// Its key is the one the node routes it by, so that the producer
		// places it on that key's partition (libs/bus checks the partition).
		if want, _ := NodeRecordKey(e, id.Node); e.Key != want {
			return e, fmt.Errorf("decode %s (%s): %w", e.ID, e.Type,
				reject(ReasonWrongKey, "%s signed by %s is keyed %q; it must be keyed by its %s, %q",
					e.Type, id.Name, truncate(e.Key), NodeEventTypes[e.Type], truncate(want)))
		}
	}
	return e, nil
}

// headersOf is the event Decode reads from m's headers, without its payload.
func (r *Registry) headersOf(m kafka.Message) (Event, error) {
	e := Event{Topic: m.Topic, Key: string(m.Key), Partition: m.Partition, Offset: m.Offset}
	readHeaders(&e, m.Headers)
	return e, nil
}

// recordType is m's ce_type header.
func recordType(m kafka.Message) string {
	for _, h := range m.Headers {
		if h.Key == HeaderType {
			return string(h.Value)
		}
	}
	return ""
}

// payloadNode is the payload's top-level string field "node" ("" when it
// has none).
func payloadNode(p proto.Message) string {
	if r, ok := p.(*eventsv1.HealthCheckCompleted); ok {
		return r.GetResult().GetNode()
	}
	return payloadString(p, "node")
}

// payloadString is the payload's top-level string field name ("" when it
// has none).
func payloadString(p proto.Message, name protoreflect.Name) string {
	if p == nil {
		return ""
	}
	m := p.ProtoReflect()
	fd := m.Descriptor().Fields().ByName(name)
	if fd == nil || fd.Kind() != protoreflect.StringKind || fd.IsList() {
		return ""
	}
	return m.Get(fd).String()
}

// peekCert reads a certificate's body without verifying it.
func peekCert(raw []byte) (auth.NodeCert, error) {
	// VerifyNodeCert with a zero key always fails on the signature; the
	// body is parsed here directly.
	var w struct {
		Body []byte `json:"b"`
	}
	var c auth.NodeCert
	if err := json.Unmarshal(raw, &w); err != nil {
		return c, fmt.Errorf("node certificate: %v", err)
	}
	if err := json.Unmarshal(w.Body, &c); err != nil {
		return c, fmt.Errorf("node certificate: %v", err)
	}
	if c.Node == "" {
		return c, errors.New("node certificate: no node")
	}
	return c, nil
}

// truncate bounds what a refusal echoes of a record's own text.
func truncate(s string) string {
	if len(s) > 200 {
		return s[:200] + "…"
	}
	return s
}
