# The prototype's before_delete_hook.sh (fixture).
kubectl drain ${NODE_NAME} --ignore-daemonsets --delete-emptydir-data
