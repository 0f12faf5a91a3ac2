// Package testenv decides whether a test tier may run here. On a developer
// machine a missing prerequisite skips the test; under CI=true it fails it,
// so a tier that cannot run never passes silently.
package testenv
