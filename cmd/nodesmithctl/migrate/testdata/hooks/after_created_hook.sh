# The prototype's after_created_hook.sh (fixture; NODE_NAME, NODE_IP and PROVIDER_ID are set).
hostnamectl set-hostname ${NODE_NAME}
kubeadm join api:6443 --token t --discovery-token-ca-cert-hash sha256:x
