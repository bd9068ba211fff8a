package auth

// PurposeStepCommands is the prefix of the purpose a node's command key is
// derived for (CommandKey): the node's full name follows it.
const PurposeStepCommands = "loom step commands v1 "

// CommandKey is the 32-byte key that seals the step commands for node (its
// full name, "clusters/…/nodes/…" as in StartStep.node): DeriveKey of the
// services' secret for PurposeStepCommands + node. The scheduler seals with
// it; the gateway hands it to that node only, with its identity; another
// node's key opens nothing of it, and no key reveals the secret.
func CommandKey(serviceSecret []byte, node string) []byte {
	return DeriveKey(serviceSecret, PurposeStepCommands+node)
}
