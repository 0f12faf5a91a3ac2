// Package deploy holds no code: its tests render the kustomize install
// under this directory with kustomize's own library (krusty, what `kubectl
// apply -k` runs) and check what each overlay gives a node. It is a module
// of its own so that kustomize stays out of the product's dependencies.
package deploy
