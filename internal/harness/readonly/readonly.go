// Package readonly makes a file or directory unwritable for the rest of a
// test, whoever runs it. Permission bits do not stop root, so as root it
// sets the immutable attribute (chattr +i, which needs a file system that
// has it, such as ext4 or XFS); otherwise it removes the write bits. Either
// way a t.Cleanup undoes it, before t.TempDir's own cleanup removes the
// directory.
package readonly

import (
	"os"
	"os/exec"
	"testing"
)

// Make makes path unwritable by this process until t ends. It fails t when
// that is not possible (root without chattr, or a file system without the
// immutable attribute).
func Make(t testing.TB, path string) {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() != 0 {
		if err := os.Chmod(path, fi.Mode().Perm()&^0o222); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = os.Chmod(path, fi.Mode().Perm()) })
		return
	}
	chattr, err := exec.LookPath("chattr")
	if err != nil {
		t.Fatalf("running as root, a file is made read-only with chattr +i: install e2fsprogs (%v)", err)
	}
	if out, err := exec.Command(chattr, "+i", path).CombinedOutput(); err != nil {
		t.Fatalf("chattr +i %s (the file system must support the immutable attribute): %v\n%s", path, err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command(chattr, "-i", path).CombinedOutput(); err != nil {
			t.Errorf("chattr -i %s: %v\n%s", path, err, out)
		}
	})
}
