// Command distpack writes the archives of a release (make dist) so that two
// builds of one commit give the same bytes: entries in name order, every
// time set to SOURCE_DATE_EPOCH, no owner names, fixed modes, and gzip
// without a name or time in its header.
//
//	distpack -tar OUT.tar.gz [-prefix DIR/] NAME=PATH...
//	distpack -zip OUT.zip NAME=PATH...
//
// Each NAME=PATH puts the file at PATH into the archive as NAME; a file that
// is executable keeps mode 0755, others get 0644.
package main

import (
	"archive/tar"
	"archive/zip"
	"compress/gzip"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
)

func main() {
	tarOut := flag.String("tar", "", "write a gzipped tar archive to this `path`")
	zipOut := flag.String("zip", "", "write a zip archive to this `path`")
	flag.Parse()
	if err := run(*tarOut, *zipOut, flag.Args()); err != nil {
		fmt.Fprintln(os.Stderr, "distpack:", err)
		os.Exit(1)
	}
}

type entry struct{ name, path string }

func run(tarOut, zipOut string, args []string) error {
	if (tarOut == "") == (zipOut == "") {
		return errors.New("give exactly one of -tar and -zip")
	}
	epoch, err := sourceDate()
	if err != nil {
		return err
	}
	var entries []entry
	for _, a := range args {
		name, path, ok := strings.Cut(a, "=")
		if !ok || name == "" || path == "" {
			return fmt.Errorf("argument %q: want NAME=PATH", a)
		}
		entries = append(entries, entry{name, path})
	}
	slices.SortFunc(entries, func(a, b entry) int { return strings.Compare(a.name, b.name) })
	out := tarOut + zipOut
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	if tarOut != "" {
		err = writeTar(f, entries, epoch)
	} else {
		err = writeZip(f, entries, epoch)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// sourceDate is SOURCE_DATE_EPOCH (seconds since 1970), which make dist
// sets to the commit's time.
func sourceDate() (time.Time, error) {
	v := os.Getenv("SOURCE_DATE_EPOCH")
	if v == "" {
		return time.Time{}, errors.New("SOURCE_DATE_EPOCH is not set: make dist sets it to the commit's time")
	}
	secs, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("SOURCE_DATE_EPOCH=%q: %w", v, err)
	}
	return time.Unix(secs, 0).UTC(), nil
}

func modeOf(info os.FileInfo) int64 {
	if info.Mode()&0o111 != 0 {
		return 0o755
	}
	return 0o644
}

func writeTar(w io.Writer, entries []entry, epoch time.Time) error {
	gz, err := gzip.NewWriterLevel(w, gzip.BestCompression)
	if err != nil {
		return err
	}
	tw := tar.NewWriter(gz)
	for _, e := range entries {
		data, info, err := read(e.path)
		if err != nil {
			return err
		}
		hdr := &tar.Header{Name: e.name, Mode: modeOf(info), Size: int64(len(data)), ModTime: epoch, Typeflag: tar.TypeReg, Format: tar.FormatPAX}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if _, err := tw.Write(data); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return gz.Close()
}

func writeZip(w io.Writer, entries []entry, epoch time.Time) error {
	zw := zip.NewWriter(w)
	for _, e := range entries {
		data, info, err := read(e.path)
		if err != nil {
			return err
		}
		hdr := &zip.FileHeader{Name: e.name, Method: zip.Deflate, Modified: epoch}
		hdr.SetMode(os.FileMode(modeOf(info)))
		fw, err := zw.CreateHeader(hdr)
		if err != nil {
			return err
		}
		if _, err := fw.Write(data); err != nil {
			return err
		}
	}
	return zw.Close()
}

func read(path string) ([]byte, os.FileInfo, error) {
	info, err := os.Stat(path)
	if err != nil {
		return nil, nil, err
	}
	data, err := os.ReadFile(path)
	return data, info, err
}
