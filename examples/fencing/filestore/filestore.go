// Package filestore is the fencing recipe for files: a directory whose files are replaced only
// by a writer whose fencing token is at least the largest one the file has accepted. A write
// goes to a temporary name first and is renamed over the file only if its token passes, so a
// reader sees the old content or the new, whole, never a stale writer's.
//
// Each file name has a companion name.token holding the largest token accepted for it, and
// name.lock, on which the check and the renames hold an exclusive flock(2): writers in several
// processes on one machine exclude each other there (flock does not reach across NFS clients).
package filestore

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// ErrStale means the write was refused: the file has accepted a larger token.
var ErrStale = errors.New("filestore: stale fencing token")

// Store is a directory of fenced files.
type Store struct {
	dir string
}

// Open returns the store in dir, creating the directory if it is missing.
func Open(dir string) (*Store, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("open store: %w", err)
	}
	return &Store{dir: dir}, nil
}

// Write replaces the file name with data if token is at least the largest token the file has
// accepted (the same holder may write again with its token); otherwise it returns an error that
// wraps ErrStale and leaves the file as it was. name is a plain file name, no directories.
func (s *Store) Write(name string, token uint64, data []byte) error {
	if name == "" || strings.ContainsRune(name, os.PathSeparator) || strings.HasPrefix(name, ".") {
		return fmt.Errorf("filestore: bad file name %q", name)
	}
	path := filepath.Join(s.dir, name)
	// The data goes to a temporary name outside the lock: a slow or stalled writer does not
	// hold up the others, and only the rename needs the check.
	tmp, err := writeTemp(s.dir, name, data)
	if err != nil {
		return err
	}
	defer os.Remove(tmp) // gone already when the rename happened

	unlock, err := lockFile(path + ".lock")
	if err != nil {
		return err
	}
	defer unlock()
	largest, err := readToken(path + ".token")
	if err != nil {
		return err
	}
	if token < largest {
		return fmt.Errorf("%w %d: %s has accepted %d", ErrStale, token, name, largest)
	}
	// The token first: if we crash between the two renames, the fence is up and the old data
	// stays, and the holder of token can write again; never new data behind an old fence.
	if token > largest {
		tt, err := writeTemp(s.dir, name+".token", []byte(strconv.FormatUint(token, 10)))
		if err != nil {
			return err
		}
		if err := os.Rename(tt, path+".token"); err != nil {
			os.Remove(tt)
			return fmt.Errorf("filestore: %w", err)
		}
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("filestore: %w", err)
	}
	return syncDir(s.dir)
}

// Read returns the file's content and the largest token it has accepted (0 and no error for a
// file never written, whose content is then nil).
func (s *Store) Read(name string) ([]byte, uint64, error) {
	path := filepath.Join(s.dir, name)
	unlock, err := lockFile(path + ".lock")
	if err != nil {
		return nil, 0, err
	}
	defer unlock()
	token, err := readToken(path + ".token")
	if err != nil {
		return nil, 0, err
	}
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, token, nil
	}
	return data, token, err
}

// writeTemp writes data to a new temporary file in dir, synced, and returns its path.
func writeTemp(dir, name string, data []byte) (string, error) {
	f, err := os.CreateTemp(dir, "."+name+".tmp-*")
	if err != nil {
		return "", fmt.Errorf("filestore: %w", err)
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(f.Name())
		return "", fmt.Errorf("filestore: %w", err)
	}
	return f.Name(), nil
}

// readToken reads a token file; a missing one is token 0.
func readToken(path string) (uint64, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("filestore: %w", err)
	}
	t, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("filestore: token file %s: %w", path, err)
	}
	return t, nil
}

// lockFile takes an exclusive flock on path (created if missing) and returns its release.
func lockFile(path string) (func(), error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("filestore: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("filestore: flock %s: %w", path, err)
	}
	return func() { f.Close() }, nil // closing the descriptor releases the flock
}

// syncDir makes the renames in dir durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("filestore: %w", err)
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("filestore: sync %s: %w", dir, err)
	}
	return nil
}
