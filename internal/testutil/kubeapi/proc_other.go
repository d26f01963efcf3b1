//go:build !linux

package kubeapi

import "syscall"

func sysProcAttr() *syscall.SysProcAttr { return nil }
