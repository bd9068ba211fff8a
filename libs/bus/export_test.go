package bus

// CrashOnStop makes c's Run return, once its context ends, without
// committing what it handled since its last commit, as a process that died
// would.
func CrashOnStop(c *Consumer) { c.crashed.Store(true) }
