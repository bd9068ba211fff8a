package ports

import (
	"os"
	"syscall"
	"time"
)

// Runtime starts and controls the processes of a node's steps and tasks:
// what the app needs of them, whatever runs them. It has the shape
// k8s-device-plugin gives NVML — the app speaks to this interface, an
// adapter speaks to the system. The process runtime
// (internal/adapters/procruntime) runs them as process groups of the
// agent's own children; a container or VM runtime would run each in a
// container or a VM and implement the same contract.
//
// The unit it controls is a Group: a process it started (the leader) and
// whatever that process starts. Every method is safe for concurrent use.
// Signals are named in Linux numbering (syscall.Signal), as Slurm names
// them; a runtime whose units take no signals maps them as it can.
type Runtime interface {
	// Start starts spec's process as the leader of a group of its own and
	// returns once it runs; its error says, for the job's log, why it
	// could not (a program not found, an interpreter missing).
	Start(spec Spec) (Process, error)
	// Signal sends sig to every process of g. A group that is gone is not
	// an error.
	Signal(g Group, sig syscall.Signal) error
	// SignalLeader sends sig to g's leader alone (a batch step's shell:
	// scancel --batch). A leader that is gone is not an error.
	SignalLeader(g Group, sig syscall.Signal) error
	// Kill ends every process of g at once (SIGKILL): what a step leaves
	// behind when its leader exits, or what ignored SIGTERM. A group that
	// is gone is not an error.
	Kill(g Group) error
	// Alive reports whether g's leader still runs and, when g.Start is not
	// 0, is the process that started then (a recycled id is not it).
	Alive(g Group) bool
	// Adopt returns the groups, each once, of the running processes whose
	// environment holds the entry marker ("KEY=value"): for an agent that
	// restarted, those a predecessor started but can no longer watch (they
	// are not its children). A group's Start is 0 when its leader is gone.
	// uid is the uid they run as (the record's, resolved when they were
	// started), else owner the user they run as ("" the agent's own),
	// resolved now: only that uid's processes are read (by real uid), so
	// that no other user's can stall the look (a read of a process's
	// environment waits on its memory map lock). Both nil (a record from
	// before owners were kept), or an owner that no longer resolves here,
	// reads every process's. A process whose environment cannot be read
	// in time (its read blocked) is taken for one without the marker: the
	// look ends within a bound whatever the processes read do.
	Adopt(marker string, uid *uint32, owner *string) []Group
	// WaitGone waits until no process of g is left, or d passes, and
	// reports whether none is.
	WaitGone(g Group, d time.Duration) bool
	// Recover finds, for an agent that restarted, the unit a predecessor
	// started as name (Spec.Name) with group g (g.PID 0 when it was never
	// recorded): a Process to wait for when it still runs (not this
	// agent's child: its Wait learns the end as the runtime recorded it),
	// else the exit the runtime recorded when it ended meanwhile, else
	// neither (nothing of it is known: it is lost).
	Recover(name string, g Group) (Process, *Exit)
	// Forget drops what the runtime keeps of the unit name (its recorded
	// exit) once the agent has recorded its end.
	Forget(name string)
	// Sweep forgets every unit whose exit the runtime still keeps and
	// keep does not name: what an agent that died between recording an
	// end and Forget left behind.
	Sweep(keep func(name string) bool)
	// Usage samples what the live processes of each of gs use now, summed
	// by group (a group with none is absent): for job accounting (sacct,
	// sstat). One call looks at every group, so that the cost of a look
	// does not grow with the steps it serves.
	Usage(gs []Group) map[Group]Sample

	// Account returns who the processes of user (a job's owner, as
	// Spec.User names it) run as here, or an error that says, for the
	// job's log, why they may not run here at all: user has no account on
	// the node, user is root where root may not run jobs, or the runtime
	// cannot act as user. The app asks first, so that a job refused here
	// touches no file.
	Account(user string) (Account, error)
	// OpenOutput opens path, a file the processes of user write to (a
	// step's output or error file, a task's), for appending, as user: the
	// system checks user's rights, not the agent's, so that no job writes,
	// creates or empties a file its owner could not. Missing directories
	// are made (mode 0700) and a new file is created (mode 0600), both
	// user's. The file is emptied first unless keep.
	OpenOutput(user, path string, keep bool) (*os.File, error)
	// OpenInput opens path, a step's input file that user's srun appends
	// to, for reading, as user (so that no job reads through it what its
	// owner could not), creating it empty (mode 0600, user's) when it is
	// not there yet.
	OpenInput(user, path string) (*os.File, error)
	// StatDir reports whether dir is a directory, looked at as user (so
	// that the answer is only what user could learn: a directory user may
	// not reach is "permission denied" whether it is there or not): nil,
	// or the system's error (fs.ErrNotExist, fs.ErrPermission,
	// syscall.ENOTDIR) without the path.
	StatDir(user, dir string) error
	// MakeDir makes dir and its missing parents as user (mode 0700): a
	// step's working directory, made where its owner may make it.
	MakeDir(user, dir string) error
	// GiveDir makes dir for user where user may not make it: a directory
	// the agent keeps for user's files (a job step's task outputs under
	// the shared dir's .loom, a model's directory, a home) under parents
	// only the agent writes. Its missing parents are the agent's (mode
	// 0755); dir is user's, mode 0700. A dir that exists must already be
	// user's own directory (not a link), else it is an error.
	GiveDir(user, dir string) error
}

// Account is who a user's processes run as on the node: the ids the job
// learns (SLURM_JOB_UID, SLURM_JOB_GID).
type Account struct {
	// Name is the account's login name ("" when it has none).
	Name string
	// UID and GID are its user and primary group ids.
	UID, GID uint32
}

// Group names a group of processes by its leader: the id the app records
// (a step's pid and pid_start) and reports, so that a restarted agent can
// find it again.
type Group struct {
	// PID is the leader's process id, which is also the group's id.
	PID int
	// Start is when the leader started, as the system counts it (clock
	// ticks since boot on Linux); 0 when not known.
	Start uint64
}

// Process is a group's leader that this agent started and may wait for.
type Process interface {
	// Group names the process's group.
	Group() Group
	// Wait blocks until the leader exits, reaps it, and says how it ended.
	// Call it once. It leaves the rest of the group running (Kill ends it).
	Wait() Exit
}

// Exit is how a group's leader ended.
type Exit struct {
	// Code is the exit status, 128+n for a leader killed by signal n.
	Code int32
	// Signal names the signal that killed it ("KILL"), "" when it exited.
	Signal string
	// OOM is true when the runtime knows the leader was ended for want of
	// memory (a container runtime's OOMKilled). The process runtime has no
	// memory limit of its own per step and never sets it: the kernel's
	// OOM killer reads there as SIGKILL.
	OOM bool
	// Unknown is true when how the unit ended is not known: a unit
	// adopted after a restart (Recover) whose end was not recorded (its
	// shim was killed with it).
	Unknown bool
	// Usage is what the leader and the children it waited for used, as
	// the kernel counted it (zero when not known).
	Usage Rusage
}

// Sample is what one group's live processes use at one instant: their CPU
// time (with that of the children they waited for), resident and virtual
// memory (bytes), and bytes read from and written to storage. PSS is their
// proportional set size (pages shared among them counted once), which
// memory limits are judged by. Unread counts the processes whose PSS could
// not be read in time and is their RSS instead (an upper bound:
// domain.JudgeMemory).
type Sample struct {
	UserCPU, SystemCPU time.Duration
	RSS, VMSize        int64
	Read, Write        int64
	PSS                int64
	Unread             int
}

// Rusage is a finished process's resource usage as wait4 reports it: CPU
// time, and the largest resident set (bytes) it or a waited-for child
// reached.
type Rusage struct {
	UserCPU, SystemCPU time.Duration
	MaxRSS             int64
}

// PTY is a process's terminal: its rows and columns (0: 24 × 80), and the
// file that gives its new size when the user's window is resized ("ROWS
// COLS"; "" none).
type PTY struct {
	Rows, Cols  uint16
	WinsizeFile string
}

// Spec describes a process to start.
type Spec struct {
	// Argv is the program and its arguments. Argv[0] is found as a shell
	// started in Dir with Env's PATH finds it: a name with a slash relative
	// to Dir, any other on PATH. Ignored when Script is set.
	Argv []string
	// Script, when set, is an executable script (it starts with "#!") run
	// instead of Argv, as the kernel runs a file that starts with "#!": the
	// interpreter its first line names gets the script's path as its
	// argument (a shell's $0), as Slurm runs a batch script. The runtime
	// hands it over without leaving a file behind.
	Script string
	// Env is the whole environment ("KEY=value"); nothing of the agent's
	// is added.
	Env []string
	// Dir is the working directory; it must exist and User must be able
	// to enter it.
	Dir string
	// Stdout and Stderr receive the process's output (the same file when
	// joined), opened with OpenOutput for User. The process gets copies:
	// the caller closes its own.
	Stdout, Stderr *os.File
	// Input, when set, is what the process reads on its stdin: a file
	// (opened with OpenInput) followed as it grows, until a file named
	// InputEOF exists and all of Input was read; then the process reads
	// end of file. Without Input, stdin is /dev/null. The process's feeder
	// has its own copy: the caller closes its own.
	Input    *os.File
	InputEOF string
	// PTY, when set, runs the process in a pseudo-terminal of its size:
	// its stdin, stdout and stderr, and its session's controlling
	// terminal; what it writes there goes to Stdout, and Input is typed
	// into it. It needs a runtime with a shim (a state directory).
	PTY *PTY
	// Nice is how far below the agent's own CPU priority the process runs
	// from its first instruction: a nice increment, 0..19 (more is 19).
	Nice int
	// User is the operating-system account the process runs as, by name
	// (a job's owner): its uid, gid and supplementary groups, from its
	// first instruction; Dir is entered, and Argv[0] found, as that user.
	// "" runs it as the agent's own account. Start refuses a user Account
	// refuses.
	User string
	// Name names the unit for the runtime's own records, unique on the
	// node (a step's key): what Recover and Forget find it by.
	Name string
}
