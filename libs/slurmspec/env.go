package slurmspec

import "strings"

// bashFuncPrefix and bashFuncSuffix frame an exported bash function's
// variable, as bash (since the Shellshock fixes) names it: `export -f
// module` puts BASH_FUNC_module%%='() { ... }' in the environment.
const (
	bashFuncPrefix = "BASH_FUNC_"
	bashFuncSuffix = "%%"
)

// ValidEnvName reports whether k may name a variable of a job's or a
// step's environment: a shell identifier (a letter or '_', then letters,
// digits and '_'), or an exported bash function, BASH_FUNC_name%% where
// name is an identifier that may also hold '.', ':' and '-'. Slurm carries
// exported functions to the job (sbatch's --export=ALL), and sites rely on
// it: Lmod's `module` is one. Anything else (an '=' or a NUL above all)
// could not be set in a process's environment as sent.
func ValidEnvName(k string) bool {
	if fn, ok := strings.CutPrefix(k, bashFuncPrefix); ok {
		if fn, ok := strings.CutSuffix(fn, bashFuncSuffix); ok {
			return name(fn, ".:-")
		}
	}
	return name(k, "")
}

// name reports whether s is an identifier, also allowing the bytes in extra
// after its first.
func name(s, extra string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		ok := c == '_' || c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' ||
			i > 0 && (c >= '0' && c <= '9' || strings.IndexByte(extra, c) >= 0)
		if !ok {
			return false
		}
	}
	return true
}
