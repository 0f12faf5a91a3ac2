// Package devinfo writes and removes the CNI Plugin Device Information File
// of the NPWG device-info specification (v1.1.0,
// github.com/k8snetworkplumbingwg/device-info-spec): the path arrives in
// runtimeConfig.CNIDeviceInfoFile when the entry declares that capability,
// and Multus copies the file into the pod's network-status "device-info".
//
// The file is written once, atomically, never over a file that is there
// (the runtime's copy of a device plugin's file, or anyone else's), and
// removed only when it holds exactly what the plugin writes for the device,
// so a record read back from disk cannot make DEL remove another file.
package devinfo
