package failpoint
