package slurmspec

// UserMayJoin reports whether a job of user (exclUser: it asked
// --exclusive=user) may take room on a node as its runs stand, as Slurm
// 22.05's OverSubscribe=USER decides (measured beside it with two OS
// users: both cases wait for Resources): owner is the user of the node's
// --exclusive=user runs ("" when none), which keep every other user's job
// off it; runs counts the node's runs and onlyUser is their user when
// they are all one user's ("" when several users' run), since an
// --exclusive=user job needs a node where no other user's job runs.
//
// It is the one rule the scheduler's placement (the OtherUser check), its
// backfill reservations and preemption (the runs left on a node) and
// sbatch --test-only's estimate apply, so that they agree.
func UserMayJoin(user string, exclUser bool, owner string, runs int, onlyUser string) bool {
	return (owner == "" || owner == user) && (!exclUser || runs == 0 || onlyUser == user)
}
