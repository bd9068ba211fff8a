// Package authz is the gateway's authorization: the one table (Table) that
// maps every gRPC method the gateway serves to the permission it needs, and
// the interceptors that enforce it before any handler runs. It fails
// closed: a method missing from the table is refused, whoever calls.
//
// The interceptors read the caller from auth.FromContext (put there by the
// authentication interceptor before them); a call without a principal is
// anonymous. The table decides per method:
//
//   - who may call at all (anonymous, any principal, project members with
//     at least a role, cluster administrators, nodes, workloads);
//   - in which project: the project of the request field the rule names
//     (parent, name, cluster, ...). A caller with no role in that project
//     gets NotFound naming the project, whether or not the resource
//     exists, so that ids cannot be probed; a member whose role is too
//     weak gets PermissionDenied.
//
// What depends on the resource itself (whose job it is, whether
// PrivateData hides it, an admin hold) is decided by the gateway's
// application layer, which reads the same principal.
package authz

import (
	"context"
	"fmt"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/loom-ml/loom/libs/auth"
	"github.com/loom-ml/loom/libs/errs"
	"github.com/loom-ml/loom/libs/resname"
)

// Access is who may call a method.
type Access uint8

// Accesses, from the most open.
const (
	// Public: anyone, anonymous callers included.
	Public Access = iota + 1
	// Authenticated: any principal (user, node, workload, service).
	Authenticated
	// Viewer: users with at least the viewer role in the project of the
	// rule's Field (cluster administrators are admins everywhere).
	Viewer
	// User: users with at least the user role in that project.
	User
	// Admin: project administrators of that project (and cluster
	// administrators). With Field "global" as its value (SetMember,
	// ListMembers), cluster administrators only.
	Admin
	// ClusterAdmin: cluster administrators only. A member of the project
	// of Field who is not one gets PermissionDenied, anyone else NotFound.
	ClusterAdmin
	// SelfOrAdmin: a user acting on their own "users/{user}" resource
	// (also "users/-"), a cluster administrator, or a project
	// administrator (the handler decides which users a project admin
	// manages: its project's members).
	SelfOrAdmin
	// NodeOnly: node principals only (their own identity).
	NodeOnly
)

// String is the access as the documentation's table writes it.
func (a Access) String() string {
	switch a {
	case Public:
		return "public"
	case Authenticated:
		return "authenticated"
	case Viewer:
		return "viewer"
	case User:
		return "user"
	case Admin:
		return "admin"
	case ClusterAdmin:
		return "cluster admin"
	case SelfOrAdmin:
		return "self or admin"
	case NodeOnly:
		return "node"
	}
	return "denied"
}

// Scope is what a workload principal (a job's own processes) may reach
// through a method.
type Scope uint8

// Scopes of a workload.
const (
	// NoWorkload: a workload may not call the method.
	NoWorkload Scope = iota
	// OwnJob: the job that Field names (or the job of the step it names)
	// must be the workload's own job, by its canonical name; any other
	// job is NotFound.
	OwnJob
	// OwnProject: Field's project must be the workload's project (a job
	// that submits jobs submits them as its owner).
	OwnProject
)

// String is the scope as the documentation's table writes it.
func (s Scope) String() string {
	switch s {
	case OwnJob:
		return "own job"
	case OwnProject:
		return "own project"
	}
	return "no"
}

// Rule is the permission one method needs.
type Rule struct {
	// Access is who may call it.
	Access Access
	// Field is the request field (a dotted path: "cluster.name") whose
	// resource name carries the project the caller's role is checked in,
	// or the user (SelfOrAdmin), or the job (a workload's OwnJob). Empty
	// for rules that do not depend on the request.
	Field string
	// Workload is what a workload principal may reach through it.
	Workload Scope
	// Node: a node principal may call it (beyond Public and Authenticated,
	// which include nodes).
	Node bool
}

// Service names, as gRPC spells them in full method names.
const (
	clusterSvc     = "/loom.v1.ClusterService/"
	reservationSvc = "/loom.v1.ReservationService/"
	jobSvc         = "/loom.v1.JobService/"
	slurmSvc       = "/loom.v1.SlurmService/"
	operationSvc   = "/loom.v1.OperationService/"
	nodeSvc        = "/loom.v1.NodeService/"
	modelSvc       = "/loom.v1.ModelService/"
	authSvc        = "/loom.v1.AuthService/"
	auditSvc       = "/loom.v1.AuditService/"
	accountSvc     = "/loom.v1.AccountService/"
	healthSvc      = "/grpc.health.v1.Health/"
	nodeHealthSvc  = "/loom.v1.HealthService/"
	goodputSvc     = "/loom.v1.GoodputService/"
	trainingSvc    = "/loom.training.v1.TrainingService/"
	metricsSvc     = "/loom.training.v1.MetricsService/"
	ingressSvc     = "/loom.v1.IngressService/"
	changeSvc      = "/loom.v1.ChangeService/"
)

// Table maps every gRPC full method name the gateway serves to the rule it
// needs. It is the only place that says who may call what: a method not
// here is refused (PermissionDenied), and TestTableCoversServer fails for
// a method the gateway registers that is missing. Read-only: do not change
// it at run time.
var Table = map[string]Rule{
	// Clusters are the project's: its admins create, resize and delete
	// them (within the project's quotas); its viewers read them.
	clusterSvc + "CreateCluster":  {Access: Admin, Field: "parent"},
	clusterSvc + "GetCluster":     {Access: Viewer, Field: "name"},
	clusterSvc + "ListClusters":   {Access: Viewer, Field: "parent"},
	clusterSvc + "DeleteCluster":  {Access: Admin, Field: "name"},
	clusterSvc + "UpdateCluster":  {Access: Admin, Field: "cluster.name"},
	clusterSvc + "GetSlurmConfig": {Access: Viewer, Field: "name"},

	// Reservations hold the site's capacity: cluster administrators make
	// and delete them; a project's viewers see its own.
	reservationSvc + "CreateReservation": {Access: ClusterAdmin, Field: "parent"},
	reservationSvc + "DeleteReservation": {Access: ClusterAdmin, Field: "name"},
	reservationSvc + "GetReservation":    {Access: Viewer, Field: "name"},
	reservationSvc + "ListReservations":  {Access: Viewer, Field: "parent"},
	reservationSvc + "ListCapacity":      {Access: Viewer, Field: "parent"},

	// Jobs: users submit and act on their own (the application checks the
	// owner: project and cluster admins act on any); viewers read. A
	// workload reads, cancels and updates its own job (a script's
	// `scontrol show job $SLURM_JOB_ID`, `scancel`, the `scontrol requeue`
	// of a checkpointing job), submits as its owner, and runs steps in its
	// own allocation. It lists only its own job (the application narrows
	// ListJobs to it).
	jobSvc + "SubmitJob": {Access: User, Field: "parent", Workload: OwnProject},
	jobSvc + "GetJob":    {Access: Viewer, Field: "name", Workload: OwnJob},
	jobSvc + "ListJobs":  {Access: Viewer, Field: "parent", Workload: OwnProject},
	jobSvc + "WatchJob":  {Access: Viewer, Field: "name", Workload: OwnJob},
	// WatchChanges shows what the lists show: the lists' role, in the
	// project watched (the lists hide what PrivateData hides).
	changeSvc + "WatchChanges": {Access: Viewer, Field: "project"},
	jobSvc + "CancelJob":       {Access: User, Field: "name", Workload: OwnJob},
	jobSvc + "UpdateJob":       {Access: User, Field: "name", Workload: OwnJob},
	jobSvc + "ReadJobLogs":     {Access: Viewer, Field: "name"},
	jobSvc + "CreateJobStep":   {Access: User, Field: "parent", Workload: OwnJob},
	jobSvc + "GetJobStep":      {Access: Viewer, Field: "name", Workload: OwnJob},
	jobSvc + "ListJobSteps":    {Access: Viewer, Field: "parent", Workload: OwnJob},
	jobSvc + "CancelJobStep":   {Access: User, Field: "name", Workload: OwnJob},

	// Slurm: sinfo reads for viewers, and for a workload of the project
	// (a job script's sinfo, scontrol show node); draining and resuming
	// nodes is the cluster administrator's (scontrol update NodeName=).
	slurmSvc + "ListPartitions":  {Access: Viewer, Field: "cluster", Workload: OwnProject},
	slurmSvc + "ListShares":      {Access: Viewer, Field: "cluster"},
	slurmSvc + "ListSlurmNodes":  {Access: Viewer, Field: "cluster", Workload: OwnProject},
	slurmSvc + "UpdateSlurmNode": {Access: ClusterAdmin, Field: "cluster"},

	// Operations are scoped by the project in their name.
	operationSvc + "GetOperation":   {Access: Viewer, Field: "name"},
	operationSvc + "WaitOperation":  {Access: Viewer, Field: "name"},
	operationSvc + "ListOperations": {Access: Viewer, Field: "parent"},
	// Cancelling a cluster create deletes the cluster: the project's
	// admins, who may delete it (DeleteCluster).
	operationSvc + "CancelOperation": {Access: Admin, Field: "name"},

	nodeSvc + "ListNodes": {Access: Viewer, Field: "parent"},

	// Hardware health: a project's viewers read its nodes' health and
	// check results; acting on nodes (scans, faulty reports, drain,
	// resume, repairs, fault injection) is the cluster administrator's,
	// as draining a node is (UpdateSlurmNode).
	nodeHealthSvc + "ListNodeHealth":        {Access: Viewer, Field: "cluster"},
	nodeHealthSvc + "ListNodeHealthEvents":  {Access: Viewer, Field: "cluster"},
	nodeHealthSvc + "ListHealthResults":     {Access: Viewer, Field: "cluster"},
	nodeHealthSvc + "GetHealthScan":         {Access: Viewer, Field: "cluster"},
	nodeHealthSvc + "ListHealthScans":       {Access: Viewer, Field: "cluster"},
	nodeHealthSvc + "GetHealthPolicy":       {Access: Viewer, Field: "cluster"},
	nodeHealthSvc + "ScanNodes":             {Access: ClusterAdmin, Field: "cluster"},
	nodeHealthSvc + "ReportFaultyNodes":     {Access: ClusterAdmin, Field: "cluster"},
	nodeHealthSvc + "UpdateNodeRemediation": {Access: ClusterAdmin, Field: "cluster"},
	nodeHealthSvc + "InjectFault":           {Access: ClusterAdmin, Field: "cluster"},

	// Goodput: a job's for whoever may see the job (its workload too; the
	// application applies PrivateData), a cluster's for its viewers.
	goodputSvc + "GetJobGoodput":     {Access: Viewer, Field: "name", Workload: OwnJob},
	goodputSvc + "GetClusterGoodput": {Access: Viewer, Field: "name"},

	// Serverless training: users create CustomJobs, tuning jobs and
	// pipelines that run as themselves, and cancel or delete their own
	// (the application checks the owner: project and cluster admins act
	// on any), as with jobs; viewers read. A workload creates as its
	// owner, as it submits jobs.
	trainingSvc + "CreateCustomJob":               {Access: User, Field: "parent", Workload: OwnProject},
	trainingSvc + "GetCustomJob":                  {Access: Viewer, Field: "name"},
	trainingSvc + "ListCustomJobs":                {Access: Viewer, Field: "parent"},
	trainingSvc + "CancelCustomJob":               {Access: User, Field: "name"},
	trainingSvc + "DeleteCustomJob":               {Access: User, Field: "name"},
	trainingSvc + "CreateHyperparameterTuningJob": {Access: User, Field: "parent", Workload: OwnProject},
	trainingSvc + "GetHyperparameterTuningJob":    {Access: Viewer, Field: "name"},
	trainingSvc + "ListHyperparameterTuningJobs":  {Access: Viewer, Field: "parent"},
	trainingSvc + "CancelHyperparameterTuningJob": {Access: User, Field: "name"},
	trainingSvc + "DeleteHyperparameterTuningJob": {Access: User, Field: "name"},
	trainingSvc + "CreateTrainingPipeline":        {Access: User, Field: "parent", Workload: OwnProject},
	trainingSvc + "GetTrainingPipeline":           {Access: Viewer, Field: "name"},
	trainingSvc + "ListTrainingPipelines":         {Access: Viewer, Field: "parent"},
	trainingSvc + "CancelTrainingPipeline":        {Access: User, Field: "name"},
	trainingSvc + "DeleteTrainingPipeline":        {Access: User, Field: "name"},

	// Training metrics: the project's viewers read every job's series.
	metricsSvc + "ListMetrics": {Access: Viewer, Field: "parent"},
	metricsSvc + "ReadMetrics": {Access: Viewer, Field: "parent"},

	// Ingress: what came in through Pub/Sub and Kafka, and why a message
	// was refused, is for the project's viewers; "projects/-" (every
	// project's) for cluster administrators.
	ingressSvc + "ListIngressProducers": {Access: Viewer, Field: "parent"},
	ingressSvc + "ListIngressMessages":  {Access: Viewer, Field: "parent"},

	modelSvc + "ListModels":        {Access: Viewer, Field: "parent"},
	modelSvc + "GetModel":          {Access: Viewer, Field: "name"},
	modelSvc + "ListModelVersions": {Access: Viewer, Field: "parent"},
	// Registering, relabelling, moving aliases, deleting and exporting
	// models are a project user's, as submitting the jobs that make them.
	modelSvc + "UploadModel":         {Access: User, Field: "parent", Workload: OwnProject},
	modelSvc + "UpdateModel":         {Access: User, Field: "model.name"},
	modelSvc + "MergeVersionAliases": {Access: User, Field: "name"},
	modelSvc + "DeleteModel":         {Access: User, Field: "name"},
	modelSvc + "DeleteModelVersion":  {Access: User, Field: "name"},
	modelSvc + "ExportModel":         {Access: User, Field: "name"},

	// Authentication: tokens are had with a credential the handler checks
	// (refresh token, OIDC ID token, the caller's own key; the login
	// daemon's user tokens; a node's job tokens), so CreateToken and
	// RegisterNode (a bootstrap token) are public.
	authSvc + "CreateToken": {Access: Public},
	authSvc + "WhoAmI":      {Access: Authenticated},
	// Holding the refresh token is the proof (a sign-out).
	authSvc + "RevokeToken":       {Access: Public},
	authSvc + "CreateApiKey":      {Access: SelfOrAdmin, Field: "parent"},
	authSvc + "ListApiKeys":       {Access: SelfOrAdmin, Field: "parent"},
	authSvc + "RevokeApiKey":      {Access: SelfOrAdmin, Field: "name"},
	authSvc + "SetMember":         {Access: Admin, Field: "parent"},
	authSvc + "ListMembers":       {Access: Admin, Field: "parent"},
	authSvc + "RegisterNode":      {Access: Public},
	authSvc + "RenewNodeIdentity": {Access: NodeOnly, Node: true},
	// The handler narrows both to the user and cluster administrators.
	authSvc + "GetOidcBinding":    {Access: SelfOrAdmin, Field: "name"},
	authSvc + "DeleteOidcBinding": {Access: SelfOrAdmin, Field: "name"},

	auditSvc + "ListAuditRecords": {Access: Admin, Field: "parent"},

	// Accounts and associations (sacctmgr): viewers list, admins write.
	accountSvc + "CreateAccount":     {Access: Admin, Field: "parent"},
	accountSvc + "ListAccounts":      {Access: Viewer, Field: "parent"},
	accountSvc + "UpdateAccount":     {Access: Admin, Field: "account.name"},
	accountSvc + "DeleteAccount":     {Access: Admin, Field: "name"},
	accountSvc + "DeleteAssociation": {Access: Admin, Field: "parent"},
	accountSvc + "SetAssociation":    {Access: Admin, Field: "parent"},
	accountSvc + "ListAssociations":  {Access: Viewer, Field: "parent"},

	// Load balancers and `loom up` probe health without credentials.
	healthSvc + "Check": {Access: Public},
	healthSvc + "List":  {Access: Public},
	healthSvc + "Watch": {Access: Public},
}

// MsgAccessDenied starts every PermissionDenied of the table: Slurm's
// words, which the Slurm-compatible commands recognise.
const MsgAccessDenied = "Access/permission denied"

// Authorize decides whether the caller of ctx may call method with req
// (the request message; nil when not yet received). It returns nil, or an
// error of kind errs.Unauthenticated (anonymous caller of a non-public
// method), errs.NotFound marked errs.Hide (a project the caller has no
// role in, another job for a workload, another user's keys),
// errs.PermissionDenied (a role too weak, a kind of
// principal the method is not for, a method missing from Table) or an
// errs.InvalidError (a name that is in no project, for callers that are
// not cluster administrators).
func Authorize(ctx context.Context, method string, req any) error {
	rule, ok := Table[method]
	if !ok {
		return fmt.Errorf("%s: %s is not in the gateway's authorization table: %w", MsgAccessDenied, method, errs.PermissionDenied)
	}
	if rule.Access == Public {
		return nil
	}
	p, ok := auth.FromContext(ctx)
	if !ok {
		return fmt.Errorf("%s needs a credential: send \"authorization: Bearer <token or API key>\" (loom auth login): %w",
			method, errs.Unauthenticated)
	}
	if rule.Access == Authenticated {
		return nil
	}
	value := field(req, rule.Field)
	switch p.Kind {
	case auth.KindUser:
		return authorizeUser(p, method, rule, value)
	case auth.KindWorkload:
		return authorizeWorkload(p, method, rule, value)
	case auth.KindNode:
		if rule.Node {
			return nil
		}
	}
	return kindDenied(p, method)
}

func kindDenied(p *auth.Principal, method string) error {
	return fmt.Errorf("%s: a %s principal (%s) may not call %s: %w", MsgAccessDenied, p.Kind, p.Name, method, errs.PermissionDenied)
}

// authorizeUser applies rule to a user principal.
func authorizeUser(p *auth.Principal, method string, rule Rule, value string) error {
	switch rule.Access {
	case NodeOnly:
		return kindDenied(p, method)
	case SelfOrAdmin:
		return selfOrAdmin(p, method, value)
	}
	need := auth.RoleViewer
	switch rule.Access {
	case User:
		need = auth.RoleUser
	case Admin, ClusterAdmin:
		need = auth.RoleAdmin
	}
	if rule.Access == Admin && value == "global" {
		// Cluster-wide membership (SetMember's cluster-admin role).
		if p.ClusterAdmin {
			return nil
		}
		return fmt.Errorf("%s: %s of global needs a cluster administrator: %w", MsgAccessDenied, method, errs.PermissionDenied)
	}
	project, ok := ProjectOf(value)
	if !ok {
		if p.ClusterAdmin {
			// The handler checks the name and says what is wrong with it.
			return nil
		}
		return errs.Invalid(rule.Field, "want a name in a project (projects/{project}/...), got %s", clip(value))
	}
	if project == "-" && !p.ClusterAdmin {
		// "projects/-" is every project: no id to probe, so the refusal
		// can say what it takes.
		return fmt.Errorf("%s: %s of every project (projects/-) needs a cluster administrator: %w", MsgAccessDenied, method, errs.PermissionDenied)
	}
	has := p.Role(project)
	if has == auth.RoleNone {
		return ProjectNotFound(project)
	}
	if rule.Access == ClusterAdmin && !p.ClusterAdmin {
		return fmt.Errorf("%s: %s needs a cluster administrator: %w", MsgAccessDenied, method, errs.PermissionDenied)
	}
	if has < need {
		return fmt.Errorf("%s: %s needs role %s in %s; %s is %s there: %w",
			MsgAccessDenied, method, need, resname.Project{ID: project}, p.Name, has, errs.PermissionDenied)
	}
	return nil
}

// selfOrAdmin lets a user reach their own users/{user}[/...] resource, and
// administrators anyone's (the handler narrows a project admin to their
// project's members).
func selfOrAdmin(p *auth.Principal, method, value string) error {
	rest, ok := strings.CutPrefix(value, "users/")
	user, _, _ := strings.Cut(rest, "/")
	if ok && user != "" && (user == "-" || user == p.User) {
		return nil
	}
	if p.ClusterAdmin {
		return nil
	}
	for _, r := range p.Roles {
		if r == auth.RoleAdmin {
			return nil
		}
	}
	// Another user's keys do not exist for the caller, as another
	// project's resources: no probing of user names.
	return errs.Hide(fmt.Errorf("%s: %w", clip(value), errs.NotFound))
}

// authorizeWorkload applies rule to a workload principal: its own job or
// project only, as the rule's scope says.
func authorizeWorkload(p *auth.Principal, method string, rule Rule, value string) error {
	switch rule.Workload {
	case OwnJob:
		job := JobOf(value)
		if job == "" || job != p.Job {
			// Any other job, existing or not, is not there for it.
			return JobNotFound(job, value)
		}
		return nil
	case OwnProject:
		project, ok := ProjectOf(value)
		if !ok {
			return errs.Invalid(rule.Field, "want a name in a project (projects/{project}/...), got %s", clip(value))
		}
		if project != p.Project {
			return ProjectNotFound(project)
		}
		return nil
	}
	return kindDenied(p, method)
}

// ProjectNotFound is the answer to a caller with no role in project: the
// same for every resource of it, existing or not; marked errs.Hide, so
// that the audit trail records the refusal it stands for.
func ProjectNotFound(project string) error {
	return errs.Hide(fmt.Errorf("%s: %w", resname.Project{ID: project}, errs.NotFound))
}

// JobNotFound is the gateway's answer for a job that is not there for the
// caller: the same message as for a job that does not exist ("job NAME:
// not found"), marked errs.Hide for the audit trail. value is the name
// asked for when job is "" (no job in it).
func JobNotFound(job, value string) error {
	if job == "" {
		job = clip(value)
	}
	return errs.Hide(fmt.Errorf("job %s: %w", job, errs.NotFound))
}

// ProjectOf returns the project id of a resource name
// "projects/{project}[/...]": a valid id, or resname.Wildcard ("-").
func ProjectOf(name string) (string, bool) {
	rest, ok := strings.CutPrefix(name, "projects/")
	if !ok {
		return "", false
	}
	id, _, _ := strings.Cut(rest, "/")
	return id, id == resname.Wildcard || resname.ValidID(id)
}

// JobOf returns the job name "projects/{p}/jobs/{id}" that name is, or
// that the step name "projects/{p}/jobs/{id}/steps/{n}" is in; "" for
// anything else.
func JobOf(name string) string {
	parts := strings.SplitN(name, "/", 6)
	if len(parts) < 4 || parts[0] != "projects" || parts[2] != "jobs" || parts[1] == "" || parts[3] == "" {
		return ""
	}
	if len(parts) > 4 && (len(parts) != 6 || parts[4] != "steps" || strings.Contains(parts[5], "/")) {
		return ""
	}
	return strings.Join(parts[:4], "/")
}

// field reads the string field at path (dotted) of req; "" when req is not
// a message, or the path is empty or names no string field.
func field(req any, path string) string {
	m, ok := req.(proto.Message)
	if !ok || path == "" {
		return ""
	}
	msg := m.ProtoReflect()
	names := strings.Split(path, ".")
	for i, n := range names {
		fd := msg.Descriptor().Fields().ByName(protoreflect.Name(n))
		if fd == nil {
			return ""
		}
		if i == len(names)-1 {
			if fd.Kind() != protoreflect.StringKind || fd.IsList() || fd.IsMap() {
				return ""
			}
			return msg.Get(fd).String()
		}
		if fd.Kind() != protoreflect.MessageKind || fd.IsList() || fd.IsMap() {
			return ""
		}
		msg = msg.Get(fd).Message()
	}
	return ""
}

// clip quotes s, cut to 64 bytes: a refusal never echoes megabytes.
func clip(s string) string {
	if len(s) > 64 {
		return fmt.Sprintf("%q…", s[:64])
	}
	return fmt.Sprintf("%q", s)
}

// UnaryServerInterceptor enforces Table on unary calls: a refused call
// never reaches its handler.
func UnaryServerInterceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		if err := Authorize(ctx, info.FullMethod, req); err != nil {
			return nil, err
		}
		return h(ctx, req)
	}
}

// StreamServerInterceptor enforces Table on streaming calls. What does not
// depend on the request (the method is in the table, the caller is not
// anonymous) is decided at once; the rest on the stream's first request
// message, before the handler sees it. A handler that sends before it
// has received (no such method in the table today) is refused, so the
// check cannot be skipped.
func StreamServerInterceptor() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
		method := info.FullMethod
		rule, ok := Table[method]
		if !ok || rule.Access == Public || rule.Access == Authenticated {
			if err := Authorize(ss.Context(), method, nil); err != nil {
				return err
			}
			return h(srv, ss)
		}
		if _, ok := auth.FromContext(ss.Context()); !ok {
			return Authorize(ss.Context(), method, nil)
		}
		return h(srv, &checkedStream{ServerStream: ss, method: method})
	}
}

// checkedStream authorizes a stream on its first request message.
type checkedStream struct {
	grpc.ServerStream
	method  string
	checked bool
}

// RecvMsg receives a message and, for the first, authorizes the call with it.
func (s *checkedStream) RecvMsg(m any) error {
	if err := s.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	if s.checked {
		return nil
	}
	if err := Authorize(s.Context(), s.method, m); err != nil {
		return err
	}
	s.checked = true
	return nil
}

// SendMsg refuses to send before the call is authorized.
func (s *checkedStream) SendMsg(m any) error {
	if !s.checked {
		return fmt.Errorf("%s: %s sent before its request was authorized: %w", MsgAccessDenied, s.method, errs.PermissionDenied)
	}
	return s.ServerStream.SendMsg(m)
}
