"""The forms of secret that redaction knows, one example each, and what it must leave alone.

Every row is a test (tests/test_privacy_forms.py) and the tables of docs/redaction.md are generated
from them: `python3 -m witty_profiler.topology.privacy_forms --write docs/redaction.md`.

The secrets below are made up; the key shapes follow the issuers' published prefixes and lengths.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, NamedTuple

R = "<redacted>"

# made-up values of the well-known shapes
JWT = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJ1c2VyLTQyIn0.c2lnbmF0dXJlLWV4YW1wbGU"
PEM_BEGIN, PEM_END = "-----BEGIN RSA PRIVATE KEY-----", "-----END RSA PRIVATE KEY-----"
SHAPES = {
    "AWS access key id": "AKIAIOSFODNN7EXAMPLE",
    "AWS temporary key id": "ASIAIOSFODNN7EXAMPLE",
    "GitHub token": "ghp_" + "Ex4mple0123456789abcdefghijklmnopqrs",
    "GitHub fine-grained token": "github_pat_" + "11EXAMPLE0123456789_abcdefghijklmnop",
    "GitLab token": "glpat-" + "Ex4mple0123456789abcd",
    "Hugging Face token": "hf_" + "Ex4mpleAbCdEfGhIjKlMnOpQrStUvWxYz01",
    "OpenAI key": "sk-proj-" + "Ex4mple0123456789abcdefghij",
    "Anthropic key": "sk-ant-api03-" + "Ex4mple0123456789abcdefghij",
    "Slack token": "xoxb-" + "123456789012-Ex4mple0123456789",
    "Google API key": "AIza" + "SyEx4mple0123456789abcdefghijklmnop",
    "Google OAuth client secret": "GOCSPX-" + "Ex4mple0123456789abcdefghij",
    "Stripe secret key": "sk_live_" + "Ex4mple0123456789abcdef",
    "npm token": "npm_" + "Ex4mple0123456789abcdefghijklmnopqrst",
    "PyPI upload token": "pypi-AgEIcHlwaS5vcmc" + "Ex4mple0123456789abcdefgh",
    "Docker Hub token": "dckr_pat_" + "Ex4mple0123456789abcdefgh",
    "JSON Web Token": JWT,
}


class Form(NamedTuple):
    kind: str        # "cmdline" (redact_cmdline), "env" (filter_env) or "record" (redact_record)
    name: str        # what the form is
    given: Any
    redacted: Any    # what is stored
    secret: str      # the text that must not survive


def _cmd(name: str, given: str, redacted: str, secret: str) -> Form:
    return Form("cmdline", name, given, redacted, secret)


FORMS: list[Form] = [
    # -- options and assignments ----------------------------------------------------------------
    _cmd("option=value", "python train.py --password=hunter2 --lr 0.1",
         f"python train.py --password={R} --lr 0.1", "hunter2"),
    _cmd("option value", "python train.py --api-key abc123 --epochs 3",
         f"python train.py --api-key {R} --epochs 3", "abc123"),
    _cmd("option with underscores", "python run.py --hf_token tok123", f"python run.py --hf_token {R}", "tok123"),
    _cmd("a value that starts with '-'", "app --password -x9Pw --lr 1", f"app --password {R} --lr 1", "x9Pw"),
    _cmd("--jwt", "app --jwt tok3nvalue", f"app --jwt {R}", "tok3nvalue"),
    _cmd("--client-secret", "app --client-secret cs3cret", f"app --client-secret {R}", "cs3cret"),
    _cmd("single-dash option (keytool)", "keytool -list -keystore ks.jks -storepass ch4ngeit",
         f"keytool -list -keystore ks.jks -storepass {R}", "ch4ngeit"),
    _cmd("redis-server --requirepass", "redis-server --port 6379 --requirepass r3disPw",
         f"redis-server --port 6379 --requirepass {R}", "r3disPw"),
    _cmd("JVM property", "java -Djavax.net.ssl.keyStorePassword=ch4ngeit -jar x.jar",
         f"java -Djavax.net.ssl.keyStorePassword={R} -jar x.jar", "ch4ngeit"),
    _cmd("-pSECRET (mysql)", "mysql -uroot -pS3cretPw db", f"mysql -uroot -p{R} db", "S3cretPw"),
    _cmd("variable in the arguments", "env PGPASSWORD=pgS3cret psql -h db", f"env PGPASSWORD={R} psql -h db",
         "pgS3cret"),
    _cmd("secret variable", "AWS_SECRET_ACCESS_KEY=awsS3cret python upload.py",
         f"AWS_SECRET_ACCESS_KEY={R} python upload.py", "awsS3cret"),
    _cmd("container variable", "docker run -e HF_TOKEN=tok123 img", f"docker run -e HF_TOKEN={R} img", "tok123"),
    _cmd("variable inside an option", "docker run --env=DB_PASSWORD=dbS3cret img",
         f"docker run --env=DB_PASSWORD={R} img", "dbS3cret"),
    _cmd("kubectl literal", "kubectl create secret generic db --from-literal=password=k8sS3cret",
         f"kubectl create secret generic db --from-literal=password={R}", "k8sS3cret"),
    _cmd("comma-separated options", "mount -t cifs //srv/x /mnt -o username=bob,password=cifsS3cret",
         f"mount -t cifs //srv/x /mnt -o username=bob,password={R}", "cifsS3cret"),
    _cmd("dotted setting", "helm install x ./chart --set db.password=helmS3cret",
         f"helm install x ./chart --set db.password={R}", "helmS3cret"),
    _cmd("quoted value of several words", "bash -c app --password 'two S3cret words' --lr 1",
         f"bash -c app --password '{R}' --lr 1", "S3cret"),
    _cmd("quoted assignment of several words", "bash -c docker run -e 'DB_PASSWORD=two S3cret words' img",
         f"bash -c docker run -e 'DB_PASSWORD={R}' img", "S3cret"),
    _cmd("JSON argument", """app --config '{"api_key": "jsonS3cret", "lr": 1}'""",
         f"""app --config '{{"api_key": "{R}", "lr": 1}}'""", "jsonS3cret"),
    _cmd("keyword argument in code", "python -c from huggingface_hub import login; login(token='pyS3cret')",
         f"python -c from huggingface_hub import login; login(token='{R}')", "pyS3cret"),
    _cmd("assignment in code", "python -c api_key = 'pyS3cret2'; run(api_key)",
         f"python -c api_key = '{R}'; run(api_key)", "pyS3cret2"),
    _cmd("git config", "git config --global user.password gitS3cret",
         f"git config --global user.password {R}", "gitS3cret"),
    _cmd("aws configure set", "aws configure set aws_secret_access_key awsS3cret2",
         f"aws configure set aws_secret_access_key {R}", "awsS3cret2"),
    _cmd("openssl pass:", "openssl rsa -in k.pem -passin pass:sslS3cret", f"openssl rsa -in k.pem -passin pass:{R}",
         "sslS3cret"),
    # -- tools whose short options take a password ------------------------------------------------
    _cmd("sshpass -p", "sshpass -p sshS3cret ssh -p 2222 host", f"sshpass -p {R} ssh -p 2222 host", "sshS3cret"),
    _cmd("redis-cli -a", "redis-cli -h cache -p 6379 -a redisS3cret ping", f"redis-cli -h cache -p 6379 -a {R} ping",
         "redisS3cret"),
    _cmd("docker login -p", "docker login -u bob -p dockerS3cret registry.example.org",
         f"docker login -u bob -p {R} registry.example.org", "dockerS3cret"),
    _cmd("piped into --password-stdin",
         "sh -c echo stdinS3cret | docker login -u bob --password-stdin registry.example.org",
         f"sh -c echo {R} | docker login -u bob --password-stdin registry.example.org", "stdinS3cret"),
    _cmd("curl -u user:password", "curl -u bob:curlS3cret https://api.example.org",
         f"curl -u bob:{R} https://api.example.org", "curlS3cret"),
    _cmd("curl -b cookie", "curl -b session=ckS3cret https://api.example.org", f"curl -b {R} https://api.example.org",
         "ckS3cret"),
    _cmd("mongosh -p", "mongosh -u admin -p mongoS3cret --host db", f"mongosh -u admin -p {R} --host db",
         "mongoS3cret"),
    _cmd("ldapsearch -w", "ldapsearch -x -D cn=admin,dc=example -w ldapS3cret",
         f"ldapsearch -x -D cn=admin,dc=example -w {R}", "ldapS3cret"),
    _cmd("openssl -k", "openssl enc -aes-256-cbc -k encS3cret -in f -out g",
         f"openssl enc -aes-256-cbc -k {R} -in f -out g", "encS3cret"),
    _cmd("smbclient -U user%password", "smbclient //srv/share -U bob%smbS3cret", f"smbclient //srv/share -U bob%{R}",
         "smbS3cret"),
    _cmd("unzip -P", "unzip -P zipS3cret data.zip", f"unzip -P {R} data.zip", "zipS3cret"),
    # -- headers -----------------------------------------------------------------------------------
    _cmd("Authorization: Bearer", "curl -H Authorization: Bearer tokS3cret https://x",
         f"curl -H Authorization: Bearer {R} https://x", "tokS3cret"),
    _cmd("quoted header (a shell's string)", "sh -c curl -H 'Authorization: Bearer tokS3cret2' https://x",
         f"sh -c curl -H 'Authorization: Bearer {R}' https://x", "tokS3cret2"),
    _cmd("Authorization:Bearer without a space", "curl -H Authorization:Bearer tokS3cret3 https://x",
         f"curl -H Authorization:Bearer {R} https://x", "tokS3cret3"),
    _cmd("Authorization: Basic", "curl -H Authorization: Basic dXNlcjpwYXNz https://x",
         f"curl -H Authorization: Basic {R} https://x", "dXNlcjpwYXNz"),
    _cmd("X-Api-Key, quoted", 'sh -c curl -H "X-Api-Key: keyS3cret" https://x', f'sh -c curl -H "X-Api-Key: {R}" https://x',
         "keyS3cret"),
    _cmd("X-Api-Key:value", "curl -H X-Api-Key:keyS3cret2 https://x", f"curl -H X-Api-Key:{R} https://x", "keyS3cret2"),
    _cmd("PRIVATE-TOKEN (GitLab)", "curl --header PRIVATE-TOKEN: glS3cret https://gitlab.example.org/api/v4/projects",
         f"curl --header PRIVATE-TOKEN: {R} https://gitlab.example.org/api/v4/projects", "glS3cret"),
    _cmd("Cookie with several values", "curl -H Cookie: session=ck1S3cret; csrf=ck2S3cret https://x",
         f"curl -H Cookie: {R} {R} https://x", "S3cret"),
    _cmd("header inside a git setting", "git -c http.extraheader=AUTHORIZATION: basic Z2l0OlMzY3JldA== clone https://x",
         f"git -c http.extraheader=AUTHORIZATION: basic {R} clone https://x", "Z2l0OlMzY3JldA=="),
    # -- URLs ----------------------------------------------------------------------------------------
    _cmd("user:password@ in a URL", "git clone https://bob:pa55w0rd@example.org/repo",
         f"git clone https://bob:{R}@example.org/repo", "pa55w0rd"),
    _cmd("token@ in a URL", "pip install git+https://tok3nvalue@github.com/org/repo",
         f"pip install git+https://{R}@github.com/org/repo", "tok3nvalue"),
    _cmd(":password@ in a URL (redis)", "app --cache redis://:redisS3cret2@cache:6379/0",
         f"app --cache redis://:{R}@cache:6379/0", "redisS3cret2"),
    _cmd("secret query parameter", "fetch https://example.org/x?token=qs3cret&q=1",
         f"fetch https://example.org/x?token={R}&q=1", "qs3cret"),
    _cmd("signed URL (sig=)", "azcopy copy https://acct.blob.core.windows.net/c?sv=2022-11-02&sig=sasS3cret /data",
         f"azcopy copy https://acct.blob.core.windows.net/c?sv=2022-11-02&sig={R} /data", "sasS3cret"),
    _cmd("connection string",
         "app --conn DefaultEndpointsProtocol=https;AccountName=acct;AccountKey=azS3cret==;EndpointSuffix=core.windows.net",
         f"app --conn DefaultEndpointsProtocol=https;AccountName=acct;AccountKey={R};EndpointSuffix=core.windows.net",
         "azS3cret"),
    _cmd("Slack webhook URL", "notify https://hooks.slack.com/services/T0000EXAM/B0000EXAM/Ex4mple0123456789abcdef",
         f"notify https://hooks.slack.com/services/{R}", "Ex4mple0123456789abcdef"),
    # -- keys of a well-known shape, wherever they are ------------------------------------------------
    *[_cmd(name, f"app --opt {value} --lr 1", f"app --opt {R} --lr 1", value) for name, value in SHAPES.items()],
    _cmd("JSON Web Token as a bare argument", f"python client.py {JWT}", f"python client.py {R}", JWT),
    _cmd("private key block", f"app --key-pem {PEM_BEGIN} MIIEpAIBAAKCAQEAex4mple {PEM_END} --lr 1",
         f"app --key-pem {PEM_BEGIN} {R} {PEM_END} --lr 1", "MIIEpAIBAAKCAQEAex4mple"),
    _cmd("private key block, lines kept", f"app {PEM_BEGIN}\nMIIEpAIBAAKCAQEAex4mple\n{PEM_END}\n",
         f"app {PEM_BEGIN} {R} {PEM_END}\n", "MIIEpAIBAAKCAQEAex4mple"),
    # -- the environment -----------------------------------------------------------------------------------
    Form("env", "credentials in an allowlisted value", {"MASTER_ADDR": "https://u:envS3cret@head:29500", "RANK": "0"},
         {"MASTER_ADDR": f"https://u:{R}@head:29500", "RANK": "0"}, "envS3cret"),
    Form("env", "a JWT in an allowlisted value", {"NCCL_X": JWT, "RANK": "0"}, {"NCCL_X": R, "RANK": "0"}, JWT),
    Form("env", "a secret name under an allowed prefix", {"NCCL_IB_AUTH_TOKEN": "ibS3cret", "NCCL_DEBUG": "INFO"},
         {"NCCL_DEBUG": "INFO"}, "ibS3cret"),
    Form("env", "a key off the allowlist", {"HF_TOKEN": "hfS3cret", "HOME": "/root", "RANK": "1"}, {"RANK": "1"},
         "hfS3cret"),
    # -- records kept as read (a legacy graph's details, an unknown type's fields) -------------------------
    Form("record", "a secret key", {"password": "detS3cret", "user": "bob"}, {"password": R, "user": "bob"},
         "detS3cret"),
    Form("record", "everything under a secret key", {"auth": {"type": "basic", "value": "detS3cret2", "port": 1}},
         {"auth": {"type": R, "value": R, "port": R}}, "detS3cret2"),
    Form("record", "an environment", {"env": {"HF_TOKEN": "detS3cret3", "RANK": "0"}}, {"env": {"RANK": "0"}},
         "detS3cret3"),
    Form("record", "an environment as a list", {"environ": ["WANDB_API_KEY=detS3cret4", "RANK=0"]},
         {"environ": ["RANK=0"]}, "detS3cret4"),
    Form("record", "an argument vector", {"cmdline": ["python", "train.py", "--token", "argvS3cret"]},
         {"cmdline": ["python", "train.py", "--token", R]}, "argvS3cret"),
    Form("record", "a command line", {"cmdline": "app --password=detS3cret5"}, {"cmdline": f"app --password={R}"},
         "detS3cret5"),
]

# What must stay exactly as it is: ordinary arguments that look a little like secrets.
KEPT: list[tuple[str, Any, str]] = [
    ("cmdline", "vllm serve /models/Llama-3-8B --tensor-parallel-size 4 --max-num-batched-tokens 8192 --max_model_len 32768",
     "a serving command"),
    ("cmdline", "python train.py --max-tokens 512 --max-new-tokens 64 --num-keys 4 --key-size 2048",
     "names whose last part is not a secret word"),
    ("cmdline", "python train.py --token-file /run/t --password-file /p --key-file /etc/ssl/k.pem --ssl-keyfile /k",
     "options naming a file hold a path, not the secret"),
    ("cmdline", "python sft.py --pad-token [PAD] --eos-token </s> --mask-token [MASK]", "a tokenizer's special tokens"),
    ("cmdline", "python train_sft.py --input_key question --output_key answer --prompt-key prompt --label-key y",
     "a dataset's column names"),
    ("cmdline", "python -m verl.trainer.main_ppo data.prompt_key=prompt data.response_key=response",
     "the same as settings"),
    ("cmdline", "ssh -p 2222 host", "-p is a port for ssh"), ("cmdline", "ssh -p2222 host", "and glued"),
    ("cmdline", "nc -l -p 8080", "and for nc"),
    ("cmdline", "docker run -p 8080:80 -p8443:443 -u 1000:1000 img", "docker run: ports and uid:gid"),
    ("cmdline", "redis-cli -h cache -p 6379 ping", "redis-cli: -p is the port (-a is the password)"),
    ("cmdline", "mysql -u root -p mydb", "mysql -p alone prompts; the next word is the database"),
    ("cmdline", "gcc -pipe -pthread -O2 -pg x.c", "-p flags of other tools"),
    ("cmdline", "docker login -u bob --password-stdin registry.example.org",
     "--password-stdin takes no value: its neighbours stay"),
    ("cmdline", "cat /run/pw | docker login -u bob --password-stdin registry.example.org",
     "a file piped into it is a path"),
    ("cmdline", "jupyter lab --ServerApp.token='' --port 8888", "an empty secret"),
    ("cmdline", "torchrun --nproc-per-node 8 --master-addr 10.0.0.1 --master-port 29500 train.py --rdzv-endpoint h:29400",
     "a launcher"),
    ("cmdline", "curl -H Content-Type: application/json -d {\"model\": \"m\", \"max_tokens\": 64} http://localhost:8000/v1",
     "other headers and JSON keys"),
    ("cmdline", "kubectl get secret db -o yaml", "a secret's name is not a secret"),
    ("cmdline", "docker run -v /run/secrets/token:/token -e PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True img",
     "paths and settings with ':'"),
    ("cmdline", "python -m sglang.launch_server --model-path /models/qwen --port 30000 --skip-auth",
     "a flag without a value"),
    ("env", {"NCCL_IB_HCA": "mlx5_0:1,mlx5_1:1", "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True",
             "MASTER_ADDR": "10.0.0.1"}, "allowlisted settings"),
    ("record", {"name": "python", "max_tokens": 512, "sort_key": "ts", "socket": "10.0.0.1:29500"},
     "a record's ordinary fields"),
]


# -- the page ------------------------------------------------------------------------------------------
_KIND_TITLES = {"cmdline": "Command lines (`redact_cmdline`)", "env": "Environment (`filter_env`)",
                "record": "Records kept as read: legacy `details`, unknown types' fields (`redact_record`)"}


def _cell(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value)
    text = text.replace("\n", "\\n").replace("|", "\\|")
    return f"`` {text} ``" if "`" in text else f"`{text}`"


def markdown() -> str:
    """The tables of docs/redaction.md: every form with its example, then what stays readable."""
    lines: list[str] = []
    n = 0
    for kind, title in _KIND_TITLES.items():
        lines += [f"### {title}", "", "| # | Form | Given | Stored |", "|---|---|---|---|"]
        for form in (f for f in FORMS if f.kind == kind):
            n += 1
            lines.append(f"| {n} | {form.name} | {_cell(form.given)} | {_cell(form.redacted)} |")
        lines.append("")
    lines += ["### Left readable", "", "| Given (stored unchanged) | Why |", "|---|---|"]
    lines += [f"| {_cell(given)} | {why} |" for _, given, why in KEPT]
    return "\n".join(lines) + "\n"


BEGIN, END = "<!-- forms: begin (generated by topology/privacy_forms.py) -->", "<!-- forms: end -->"


def page_with_tables(page: str) -> str:
    """The page with its generated tables replaced by the current ones."""
    head, _, rest = page.partition(BEGIN)
    _, _, tail = rest.partition(END)
    return f"{head}{BEGIN}\n\n{markdown()}\n{END}{tail}"


if __name__ == "__main__":  # python3 -m witty_profiler.topology.privacy_forms --write docs/redaction.md
    if len(sys.argv) == 3 and sys.argv[1] == "--write":
        path = Path(sys.argv[2])
        path.write_text(page_with_tables(path.read_text()))
    else:
        sys.stdout.write(markdown())
