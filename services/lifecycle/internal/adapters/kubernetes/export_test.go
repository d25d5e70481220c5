package kubernetes

// ToNode exposes toNode to the contract test's harness, which reads Nodes
// as the adapter maps them.
var ToNode = toNode
