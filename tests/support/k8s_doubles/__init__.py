"""Test doubles of kubeadm, kubelet, kubectl, systemctl and of every other command of the kubeadm
profile (examples/kubeadm/cluster.yaml) that would change the host it runs on. Never used in
production: tests put this directory first in the agents' PATH (doubles.agent_env) so that the
profile runs unmodified and changes nothing but files under each agent's root. The network
tools of its cleanup (iptables-save/-restore, ip, nft) have no double: the tests run it with the
real ones, only inside network namespaces of their own.

Each executable here is a symlink to `double`, which runs doubles.py with the command's name.
"""
