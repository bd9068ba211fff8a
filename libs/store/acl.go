package store

// ACLCommands are the Redis commands a process that keeps its state in a
// Store (and reaches Redis through libs/service) sends, and nothing more:
// the connection's own (AUTH, HELLO, PING; go-redis' CLIENT SETINFO is
// left out: Redis before 7.2 knows no such command, which would fail the
// whole ACL SETUSER, and go-redis ignores its refusal), the
// Lua scripts of Apply and the leases (EVALSHA only: the commands the
// scripts call are checked one by one as well), MULTI/EXEC of the relay and
// the change log, and the reads and writes of strings, hashes, sets, sorted
// sets and streams. No command that names no key (SCAN, KEYS, RANDOMKEY),
// none that reaches the server's state (CONFIG, FLUSH*, SCRIPT, FUNCTION,
// CLIENT KILL, DEBUG, ACL) and no Pub/Sub: an ACL key pattern cannot
// confine those.
//
// Nor EVAL: a script of the user's own runs as long as it likes, and while
// it runs Redis answers every other client, every service's, BUSY (`EVAL
// "while true do end" 0` needs no key). With EVALSHA alone the user runs
// only the scripts in Redis's cache, which trusted processes put there: the
// store's (Scripts), loaded by the provisioner at every pass, and the
// store's own EVAL fallback for users that have EVAL. A user without EVAL
// whose script is not cached waits for it (runScript).
//
// A new command in this package must be added here: TestACLRulesCoverTheStore
// runs the store as a user with only these.
var ACLCommands = []string{
	"auth", "hello", "ping",
	"evalsha", "multi", "exec",
	"exists", "type", "get", "set", "setnx", "del", "pexpire",
	"hget", "hset", "hdel", "hgetall", "hlen", "hmget", "hscan",
	"sadd", "srem", "smembers",
	"zadd", "zrem", "zrangebylex", "zrevrangebylex",
	"xadd", "xdel", "xlen", "xrange", "xrevrange",
}

// ACLRules are the rules of `ACL SETUSER <user> reset on >PASSWORD ...` that
// confine a user to the store whose keys start with prefix ("agent-c-h:"):
// the key pattern prefix*, no Pub/Sub channel, and ACLCommands only.
func ACLRules(prefix string) []string {
	r := []string{"~" + prefix + "*", "resetchannels", "-@all"}
	for _, c := range ACLCommands {
		r = append(r, "+"+c)
	}
	return r
}
