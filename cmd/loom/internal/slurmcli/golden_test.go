package slurmcli

import "testing"

// TestGoldenOutputs runs each command against the fixture and compares
// its whole output, byte for byte, with Slurm 22.05's layout (widths,
// justification, truncation, trailing spaces).
func TestGoldenOutputs(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"squeue"},
			"             JOBID PARTITION     NAME     USER ST       TIME  NODES NODELIST(REASON)\n" +
				"        15_[1-3%2]     debug    sweep    alice PD       0:00      1 (JobArrayTaskLimit)\n" +
				"              15_0     debug    sweep    alice  R       0:30      1 gpu-0003\n" +
				"                13       gpu evaluati      bob PD       0:00      1 (Priority)\n" +
				"                14       gpu     held    alice PD       0:00      1 (JobHeldUser)\n" +
				"                12       gpu    train    alice  R    1:02:03      2 gpu-[0001-0002]\n"},
		{[]string{"squeue", "-l"},
			"Fri Jan 02 15:04:05 2026\n" +
				"             JOBID PARTITION     NAME     USER    STATE       TIME TIME_LIMI  NODES NODELIST(REASON)\n" +
				"        15_[1-3%2]     debug    sweep    alice  PENDING       0:00   1:00:00      1 (JobArrayTaskLimit)\n" +
				"              15_0     debug    sweep    alice  RUNNING       0:30   1:00:00      1 gpu-0003\n" +
				"                13       gpu evaluati      bob  PENDING       0:00 UNLIMITED      1 (Priority)\n" +
				"                14       gpu     held    alice  PENDING       0:00 UNLIMITED      1 (JobHeldUser)\n" +
				"                12       gpu    train    alice  RUNNING    1:02:03   2:00:00      2 gpu-[0001-0002]\n"},
		{[]string{"squeue", "-r", "-u", "alice", "-p", "debug"},
			"             JOBID PARTITION     NAME     USER ST       TIME  NODES NODELIST(REASON)\n" +
				"              15_1     debug    sweep    alice PD       0:00      1 (JobArrayTaskLimit)\n" +
				"              15_2     debug    sweep    alice PD       0:00      1 (JobArrayTaskLimit)\n" +
				"              15_3     debug    sweep    alice PD       0:00      1 (JobArrayTaskLimit)\n" +
				"              15_0     debug    sweep    alice  R       0:30      1 gpu-0003\n"},
		{[]string{"squeue", "-t", "CD,F", "-o", "%i %t %r"},
			"JOBID ST REASON\n" +
				"9 CD None\n" +
				"10 CD None\n" +
				"11 F NonZeroExitCode\n"},
		{[]string{"sinfo"},
			"PARTITION AVAIL  TIMELIMIT  NODES  STATE NODELIST\n" +
				"gpu*         up   infinite      1  drain gpu-0004\n" +
				"gpu*         up   infinite      1    mix gpu-0003\n" +
				"gpu*         up   infinite      2  alloc gpu-[0001-0002]\n" +
				"debug        up    1:00:00      1    mix gpu-0003\n"},
		{[]string{"sinfo", "-N"},
			"NODELIST   NODES PARTITION STATE \n" +
				"gpu-0001       1      gpu* alloc \n" +
				"gpu-0002       1      gpu* alloc \n" +
				"gpu-0003       1      gpu* mix   \n" +
				"gpu-0003       1     debug mix   \n" +
				"gpu-0004       1      gpu* drain \n"},
		// CPUS left-justified, as Slurm 22.05's sinfo -N -l prints it.
		{[]string{"sinfo", "-N", "-l", "-p", "debug"},
			"Fri Jan 02 15:04:05 2026\n" +
				"NODELIST   NODES PARTITION       STATE CPUS    S:C:T MEMORY TMP_DISK WEIGHT AVAIL_FE REASON              \n" +
				"gpu-0003       1     debug       mixed 16     16:1:1 102400        0      1   (null) none                \n"},
		{[]string{"sinfo", "-s"},
			"PARTITION AVAIL  TIMELIMIT   NODES(A/I/O/T) NODELIST\n" +
				"gpu*         up   infinite          3/0/1/4 gpu-[0001-0004]\n" +
				"debug        up    1:00:00          1/0/0/1 gpu-0003\n"},
		{[]string{"sinfo", "-R"},
			"REASON               USER      TIMESTAMP           NODELIST\n" +
				"bad gpu              alice     2026-01-02T13:04:05 gpu-0004\n"},
		{[]string{"sacct"},
			"JobID           JobName  Partition    Account  AllocCPUS      State ExitCode \n" +
				"------------ ---------- ---------- ---------- ---------- ---------- -------- \n" +
				"10                 prep        gpu                     1  COMPLETED      0:0 \n" +
				"10.batch          batch                                1  COMPLETED      0:0 \n" +
				"11                 oops        gpu                     1     FAILED      2:0 \n" +
				"11.batch          batch                                1     FAILED      2:0 \n" +
				"12                train        gpu   research          8    RUNNING      0:0 \n" +
				"12.batch          batch              research          4    RUNNING      0:0 \n" +
				"15_0              sweep      debug                     1    RUNNING      0:0 \n" +
				"15_0.batch        batch                                1    RUNNING      0:0 \n"},
		{[]string{"sacct", "-P", "-X", "-a", "--format=JobID,JobName%20,State,ExitCode,Elapsed,Start,End,NodeList", "-j", "10,11,12,13,14,15"},
			"JobID|JobName|State|ExitCode|Elapsed|Start|End|NodeList\n" +
				"10|prep|COMPLETED|0:0|01:00:00|2026-01-02T13:04:05|2026-01-02T14:04:05|gpu-0003\n" +
				"11|oops|FAILED|2:0|00:01:00|2026-01-02T14:14:05|2026-01-02T14:15:05|gpu-0004\n" +
				"12|train|RUNNING|0:0|01:02:03|2026-01-02T14:02:02|Unknown|gpu-[0001-0002]\n" +
				"13|evaluation-long-name|PENDING|0:0|00:00:00|Unknown|Unknown|None assigned\n" +
				"14|held|PENDING|0:0|00:00:00|Unknown|Unknown|None assigned\n" +
				"15_0|sweep|RUNNING|0:0|00:00:30|2026-01-02T15:03:35|Unknown|gpu-0003\n" +
				"15_[1-3%2]|sweep|PENDING|0:0|00:00:00|Unknown|Unknown|None assigned\n"},
		{[]string{"sacct", "--format=JobID,JobName%-4,Timelimit,AllocTRES%40", "-j", "12,10"},
			"JobID        JobN  Timelimit                                AllocTRES \n" +
				"------------ ---- ---------- ---------------------------------------- \n" +
				"10           prep  UNLIMITED                   billing=1,cpu=1,node=1 \n" +
				"10.batch     bat+                              billing=1,cpu=1,node=1 \n" +
				"12           tra+   02:00:00 billing=8,cpu=8,gres/gpu=16,mem=128G,no+ \n" +
				"12.batch     bat+            billing=4,cpu=4,gres/gpu=8,mem=64G,node+ \n"},
		{[]string{"sacct", "-j", "11", "-D", "-n"},
			"11                 oops        gpu                     1  NODE_FAIL      0:0 \n" +
				"11.batch          batch                                1  CANCELLED      0:0 \n" +
				"11                 oops        gpu                     1     FAILED      2:0 \n" +
				"11.batch          batch                                1     FAILED      2:0 \n"},
		// A script from --wrap or standard input has no file: (null), as
		// Slurm 22.05's squeue (and Command=) show it.
		{[]string{"squeue", "-j", "12,13,14", "-o", "%i %o"},
			"JOBID COMMAND\n" +
				"13 (null)\n" +
				"14 /bin/true \ufffd]52;c;aGk=\ufffd\ufffd[2J\n" +
				"12 /home/alice/train.sh\n"},
		{[]string{"scontrol", "show", "job", "12"},
			"JobId=12 JobName=train\n" +
				"   UserId=alice GroupId=alice MCS_label=N/A\n" +
				"   Priority=1000 Nice=0 Account=research QOS=normal\n" +
				"   JobState=RUNNING Reason=None Dependency=(null)\n" +
				"   Requeue=1 Restarts=0 BatchFlag=1 Reboot=0 ExitCode=0:0\n" +
				"   RunTime=01:02:03 TimeLimit=02:00:00 TimeMin=N/A\n" +
				"   SubmitTime=2026-01-02T12:04:05 EligibleTime=2026-01-02T12:04:05\n" +
				"   AccrueTime=2026-01-02T12:04:05\n" +
				"   StartTime=2026-01-02T14:02:02 EndTime=2026-01-02T16:02:02 Deadline=N/A\n" +
				"   SuspendTime=None SecsPreSuspend=0 LastSchedEval=2026-01-02T12:04:05 Scheduler=Main\n" +
				"   Partition=gpu AllocNode:Sid=login-1:0\n" +
				"   ReqNodeList=(null) ExcNodeList=(null)\n" +
				"   NodeList=gpu-[0001-0002]\n" +
				"   BatchHost=gpu-0001\n" +
				"   NumNodes=2 NumCPUs=8 NumTasks=2 CPUs/Task=4 ReqB:S:C:T=0:0:*:*\n" +
				"   TRES=cpu=8,mem=128G,node=2,billing=8,gres/gpu=16\n" +
				"   Socks/Node=* NtasksPerN:B:S:C=0:0:*:* CoreSpec=*\n" +
				"   MinCPUsNode=4 MinMemoryNode=64G MinTmpDiskNode=0\n" +
				"   Features=(null) DelayBoot=00:00:00\n" +
				"   OverSubscribe=OK Contiguous=0 Licenses=(null) Network=(null)\n" +
				"   Command=/home/alice/train.sh\n" +
				"   WorkDir=/home/alice\n" +
				"   StdErr=/home/alice/slurm-12.out\n" +
				"   StdIn=/dev/null\n" +
				"   StdOut=/home/alice/slurm-12.out\n" +
				"   Power=\n" +
				"   TresPerNode=gres:gpu:h100:8\n" +
				"   \n" + // Slurm 22.05's empty last line
				"\n"},
		{[]string{"scontrol", "show", "node", "gpu-0004"},
			"NodeName=gpu-0004 Arch=x86_64 CoresPerSocket=1 \n" +
				"   CPUAlloc=0 CPUEfctv=16 CPUTot=16 CPULoad=N/A\n" +
				"   AvailableFeatures=(null)\n" +
				"   ActiveFeatures=(null)\n" +
				"   Gres=gpu:h100:8\n" +
				"   NodeAddr=gpu-0004 NodeHostName=gpu-0004 Version=22.05.8\n" +
				"   RealMemory=1024000 AllocMem=0 FreeMem=N/A Sockets=16 Boards=1\n" +
				"   State=IDLE+DRAIN ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A\n" +
				"   Partitions=gpu \n" +
				"   BootTime=None SlurmdStartTime=None\n" +
				"   LastBusyTime=None\n" +
				"   CfgTRES=cpu=16,mem=1024000M,billing=16,gres/gpu=8\n" +
				"   AllocTRES=\n" +
				"   CapWatts=n/a\n" +
				"   CurrentWatts=0 AveWatts=0\n" +
				"   ExtSensorsJoules=n/s ExtSensorsWatts=0 ExtSensorsTemp=n/s\n" +
				"   Reason=bad gpu [alice@2026-01-02T13:04:05]\n" +
				"\n"},
		{[]string{"scontrol", "show", "partition", "debug"},
			"PartitionName=debug\n" +
				"   AllowGroups=ALL AllowAccounts=ALL AllowQos=ALL\n" +
				"   AllocNodes=ALL Default=NO QoS=N/A\n" +
				"   DefaultTime=NONE DisableRootJobs=NO ExclusiveUser=NO GraceTime=0 Hidden=NO\n" +
				"   MaxNodes=UNLIMITED MaxTime=01:00:00 MinNodes=0 LLN=NO MaxCPUsPerNode=UNLIMITED\n" +
				"   Nodes=gpu-0003\n" +
				"   PriorityJobFactor=1 PriorityTier=10 RootOnly=NO ReqResv=NO OverSubscribe=NO\n" +
				"   OverTimeLimit=NONE PreemptMode=REQUEUE\n" +
				"   State=UP TotalCPUs=16 TotalNodes=1 SelectTypeParameters=NONE\n" +
				"   JobDefaults=(null)\n" +
				"   DefMemPerNode=UNLIMITED MaxMemPerNode=UNLIMITED\n" +
				"   TRES=cpu=16,mem=1024000M,node=1,billing=16,gres/gpu=8\n" +
				"\n"},
		{[]string{"sprio"},
			"          JOBID PARTITION   PRIORITY       SITE        AGE  FAIRSHARE    JOBSIZE  PARTITION        QOS\n" +
				"             13 gpu              900          0          5        300         45        400        150\n" +
				"             14 gpu                0          0          0          0          0          0          0\n" +
				"           15_1 debug            800          0          0          0          0          0          0\n" +
				"           15_2 debug            800          0          0          0          0          0          0\n" +
				"           15_3 debug            800          0          0          0          0          0          0\n"},
	} {
		code, got, errOut := run(t, fixture(), tc.args[0], Env{}, tc.args[1:]...)
		if code != 0 || errOut != "" || got != tc.want {
			t.Errorf("%v: exit %d, stderr %q\n got:\n%s\nwant:\n%s", tc.args, code, errOut, got, tc.want)
		}
	}
}
