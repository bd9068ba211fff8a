package app

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
)

// writeKeyFile writes the key make returns to path, mode 0600 (its
// directory 0700 when it makes it), unless path exists: a key is made once,
// on the first start, and never overwritten.
func writeKeyFile(path string, make func() (string, error)) error {
	if _, err := os.Stat(path); err == nil {
		return nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	key, err := make()
	if err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, fs.ErrExist) {
		return nil // another gateway wrote it first; its key is the one kept
	}
	if err != nil {
		return err
	}
	_, err = f.WriteString(key + "\n")
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
