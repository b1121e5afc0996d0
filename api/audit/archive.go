package audit

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
)

// A checkpoint archive keeps every signed checkpoint outside the database
// that holds the ledger (REVIEWLEDGER_AUDIT_WITNESS_DIR): a restore of the
// database from a backup rolls the database's own checkpoints back with
// the ledger, but not the archive's, so `audit verify --witness` names
// the reviews and checkpoints a restore (or a removal) lost.

// ErrArchiveConflict is wrapped by CheckpointArchive.Put when the archive
// already holds a different checkpoint under the seq: the database signed
// a second chain (it was restored to an earlier point, or the archive is
// another ledger's).
var ErrArchiveConflict = errors.New("the archive holds a different checkpoint under this seq")

// ArchiveReader reads an archive of signed checkpoints.
type ArchiveReader interface {
	// Name identifies the archive in reports ("witness /var/lib/…").
	Name() string
	// All returns every archived checkpoint in seq order. An entry that
	// cannot be read is an error wrapping ErrBadCheckpoint that names it.
	All(ctx context.Context) ([]Stored, error)
}

// CheckpointArchive keeps signed checkpoints, create-only: an entry once
// written is never replaced or removed by the service. The contract is
// small enough for an object store (a bucket with object lock) to keep.
type CheckpointArchive interface {
	ArchiveReader
	// Put stores a checkpoint under its seq, durably before it returns.
	// Putting one already held, byte for byte, is nil (a retry); a
	// different one under the seq is an error wrapping
	// ErrArchiveConflict, and the one held stays.
	Put(ctx context.Context, s Stored) error
	// Last returns the highest seq archived, 0 when none is.
	Last(ctx context.Context) (int64, error)
}

// DirArchive is a CheckpointArchive in a directory: one file per
// checkpoint, named by its seq zero-padded to 20 digits
// (00000000000000000012.checkpoint), holding the checkpoint's body as
// signed and then a line "signature " + the signature in base64. Files
// are written to a temporary name, synced, and linked to their name
// (link fails when the name exists, so nothing is ever overwritten), and
// the directory is synced. An operator ships the files elsewhere (rsync,
// an object store); verify checks their chain from #1, so a copy keeps
// every file.
type DirArchive struct {
	Dir string
}

var _ CheckpointArchive = DirArchive{}

// archiveName matches an archived file's name.
var archiveName = regexp.MustCompile(`^[0-9]{20}\.checkpoint$`)

const signaturePrefix = "signature "

// archiveMode is an archived file's mode: readable by the group that ships
// the files, written by nobody.
const archiveMode = 0o440

// OpenDirArchive returns the archive in dir, which must be an existing
// directory this process can create files in (checked by creating and
// removing one).
func OpenDirArchive(dir string) (DirArchive, error) {
	fi, err := os.Stat(dir)
	if err != nil {
		return DirArchive{}, err
	}
	if !fi.IsDir() {
		return DirArchive{}, fmt.Errorf("%s: not a directory", dir)
	}
	f, err := os.CreateTemp(dir, ".probe-*")
	if err != nil {
		return DirArchive{}, fmt.Errorf("%s: not writable: %w", dir, err)
	}
	f.Close()
	if err := os.Remove(f.Name()); err != nil {
		return DirArchive{}, err
	}
	return DirArchive{Dir: dir}, nil
}

// Name implements ArchiveReader.
func (a DirArchive) Name() string { return "witness " + a.Dir }

func (a DirArchive) path(seq int64) string {
	return filepath.Join(a.Dir, fmt.Sprintf("%020d.checkpoint", seq))
}

// encodeArchived is the content of an archived checkpoint's file.
func encodeArchived(s Stored) []byte {
	var b bytes.Buffer
	b.Write(s.Body)
	b.WriteString(signaturePrefix)
	b.WriteString(base64.StdEncoding.EncodeToString(s.Signature))
	b.WriteByte('\n')
	return b.Bytes()
}

// decodeArchived reads a file written by encodeArchived.
func decodeArchived(name string, data []byte) (Stored, error) {
	bad := func(why string) (Stored, error) {
		return Stored{}, fmt.Errorf("%s: %s: %w", name, why, ErrBadCheckpoint)
	}
	body, last, ok := cutLastLine(data)
	if !ok {
		return bad("no signature line")
	}
	enc, ok := bytes.CutPrefix(last, []byte(signaturePrefix))
	if !ok {
		return bad("the last line is not the signature")
	}
	sig, err := base64.StdEncoding.DecodeString(string(enc))
	if err != nil {
		return bad("signature: " + err.Error())
	}
	c, err := ParseCheckpoint(body)
	if err != nil {
		return Stored{}, fmt.Errorf("%s: %w", name, err)
	}
	if want := fmt.Sprintf("%020d.checkpoint", c.Seq); filepath.Base(name) != want {
		return bad("holds checkpoint #" + strconv.FormatInt(c.Seq, 10) + ", not the one its name says")
	}
	return Stored{Seq: c.Seq, Body: body, Signature: sig}, nil
}

// cutLastLine splits data ending in a newline into what comes before its
// last line and that line (without the newline).
func cutLastLine(data []byte) (before, last []byte, ok bool) {
	rest, found := bytes.CutSuffix(data, []byte("\n"))
	if !found {
		return nil, nil, false
	}
	i := bytes.LastIndexByte(rest, '\n')
	if i < 0 {
		return nil, nil, false
	}
	return data[:i+1], rest[i+1:], true
}

// Put implements CheckpointArchive.
func (a DirArchive) Put(ctx context.Context, s Stored) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	final := a.path(s.Seq)
	data := encodeArchived(s)
	tmp, err := os.CreateTemp(a.Dir, ".put-*")
	if err != nil {
		return fmt.Errorf("archive checkpoint #%d: %w", s.Seq, err)
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(archiveMode); err != nil {
		tmp.Close()
		return fmt.Errorf("archive checkpoint #%d: %w", s.Seq, err)
	}
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return fmt.Errorf("archive checkpoint #%d: %w", s.Seq, err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("archive checkpoint #%d: %w", s.Seq, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("archive checkpoint #%d: %w", s.Seq, err)
	}
	if err := os.Link(tmp.Name(), final); errors.Is(err, fs.ErrExist) {
		return a.same(final, data)
	} else if err != nil {
		return fmt.Errorf("archive checkpoint #%d: %w", s.Seq, err)
	}
	return syncDir(a.Dir)
}

// same checks that the file held under a name is data.
func (a DirArchive) same(path string, data []byte) error {
	held, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if !bytes.Equal(held, data) {
		return fmt.Errorf("%s: %w", path, ErrArchiveConflict)
	}
	return nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	return nil
}

// names lists the archived files, in seq order (their names sort so).
func (a DirArchive) names() ([]string, error) {
	entries, err := os.ReadDir(a.Dir) // sorted by name
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range entries {
		if e.Type().IsRegular() && archiveName.MatchString(e.Name()) {
			out = append(out, e.Name())
		}
	}
	return out, nil
}

// Last implements CheckpointArchive.
func (a DirArchive) Last(context.Context) (int64, error) {
	names, err := a.names()
	if err != nil || len(names) == 0 {
		return 0, err
	}
	return strconv.ParseInt(names[len(names)-1][:20], 10, 64)
}

// All implements ArchiveReader.
func (a DirArchive) All(ctx context.Context) ([]Stored, error) {
	names, err := a.names()
	if err != nil {
		return nil, err
	}
	out := make([]Stored, 0, len(names))
	for _, n := range names {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		path := filepath.Join(a.Dir, n)
		data, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		s, err := decodeArchived(path, data)
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, nil
}
