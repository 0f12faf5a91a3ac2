// Package state persists one record per CNI attachment on the node so that
// DEL, CHECK and GC can undo exactly what ADD did, even after a crash. Records
// are JSON files written atomically under <dir>/attachments/, a node-wide
// flock on <dir>/lock serialises concurrent plugin processes, and a flock
// per attachment on <dir>/keys/<record name>.lock, a file that exists while
// a call holds it, keeps the calls about one attachment from interleaving
// (LockKey).
//
// # Links
//
// The plugin runs as root, so the store never follows a symbolic link at or
// below the configured state directory and never creates a file through one:
//
//   - the state directory itself must be a real directory, owned by the
//     plugin's user and not writable by every user (another user could
//     plant records or hold the lock file); a symbolic link there is refused
//     (ErrUnsafePath), never resolved. A missing directory is created (0700,
//     with its parents) and checked again after creation;
//   - attachments/, quarantine/ and keys/ are held to the same rule;
//   - the lock files and every record are opened with O_NOFOLLOW, temporary
//     files with O_CREAT|O_EXCL|O_NOFOLLOW. A link, directory or other
//     non-regular file at a record path reads as a corrupt record
//     (*CorruptError), which Quarantine moves aside without following it.
//
// Symbolic links in the path components above the state directory (for
// example /var/run -> /run) are followed by the kernel: they are part of the
// path the operator configured, root's in every supported layout, and are
// trusted as the configuration is. Everything the store creates beneath the
// state directory is 0700/0600, so only root can plant a link there.
//
// # Locking
//
// Lock is bounded: it polls a non-blocking flock until its timeout and then
// fails with ErrLockTimeout naming the holders' pids, so a stuck holder never
// blocks a verb forever. When the state directory is missing and cannot be
// created, Lock fails with ErrNoStateDir: no state can exist then.
// Every writer writes only while holding the lock; Sweep, called under the
// lock, therefore removes every temporary file left by a killed writer.
//
// A key lock (LockKey) is waited for only before the node lock is taken:
// a call that holds the node lock takes key locks only with TryLockKey,
// so no two calls wait for each other in a cycle. A key lock's file
// exists while a call holds it; Sweep and DropKeyLock remove the unheld
// files killed calls left.
//
// # Unreadable records
//
// Get and List report a record that cannot be decoded or validated as a
// *CorruptError (errors.Is(err, ErrCorrupt)), naming the file. The caller
// moves it aside with Quarantine so that DEL and GC are never blocked by it;
// the last 32 quarantined files are kept for inspection.
package state
