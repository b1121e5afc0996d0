package notify

// lockKey is the advisory lock electing the one active notifier.
const lockKey int64 = 0x726c6e6f74696679 // "rlnotify"

// LockKey is the advisory lock the active notifier holds, for telling who
// it is (pglock.Holders).
const LockKey = lockKey
