package testutil

import (
	"errors"
	"os"
	"path/filepath"
)

// EnvCache names the directory where builds and tools outlive a clone.
const EnvCache = "CONTINUUM_CACHE"

// CacheDir is $CONTINUUM_CACHE, or $HOME/.cache/continuum: the rule the
// Makefile and the scripts under scripts/ follow too. Entries in it carry
// their version in their name (bin/helm-v3.22.0, kube-apiserver-v1.37.2/), so
// clones of different revisions share it.
func CacheDir() (string, error) {
	if d := os.Getenv(EnvCache); d != "" {
		return d, nil
	}
	home := os.Getenv("HOME")
	if home == "" {
		return "", errors.New("neither " + EnvCache + " nor HOME is set")
	}
	return filepath.Join(home, ".cache", "continuum"), nil
}
