// Package reconcile releases the attachments of pods that are gone (the GC
// runtimes behind Terway never send), through the plugin's own DEL: passes
// that ask CRI or the kernel which pods are gone, and between them repairs
// on kernel events that give a dead pod's device back.
package reconcile
