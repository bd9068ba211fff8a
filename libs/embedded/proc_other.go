//go:build !linux

package embedded

import "syscall"

// childAttr has nothing to add where the kernel cannot tie a child's life to its parent.
func childAttr() *syscall.SysProcAttr { return nil }
