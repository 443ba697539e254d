"""Wire-level fakes of the clouds and test machines the launcher's tests and benchmarks run
against (not shipped in the wheel; on the path through the editable install):

- `fakes.aws`: moto's real EC2/IAM HTTP server with faults injected on the wire, and its
  instances as SSH hosts;
- `fakes.gce`: a Compute Engine / IAM / Resource Manager server of our own;
- `fakes.kube`: a kube-apiserver and kubelets of our own;
- `fakes.hosts`: machines as separate PID and mount namespaces with a real sshd, and
  container engines for them.

The contract suite, the in-memory provider and the fault injector the fakes share are part
of the package: `launcher.testing`.
"""
