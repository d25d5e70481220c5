module github.com/nodesmith/nodesmith/services/cloud-adapter

go 1.26
