// Package hostile runs the built plugin against a corpus of malformed and
// hostile inputs (testdata/cases/*.json): configurations, prevResults at every
// CNI version, CNI_ARGS, annotations, the environment, planted state records
// and hostile dataDir/logFile layouts. Each case file carries its input and
// its exact expected outcome: one CNI error object with the code
// docs/configuration.md documents, or success (pass-through, or DEL/GC quarantining an unreadable record); never
// a panic, and never a change to the host outside the case's own folder.
package hostile
