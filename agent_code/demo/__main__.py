import sys

from agent_code.cli import main
from agent_code.demo import demo_argv, local_demo_argv

EXIT_MAX_STEPS = 3

if __name__ == "__main__":
    args = sys.argv[1:]
    if "--scripted" in args:
        args.remove("--scripted")
        main(demo_argv(*args))
        sys.exit(0)
    try:
        main(local_demo_argv(*args))
    except SystemExit as exc:
        if exc.code != EXIT_MAX_STEPS:
            raise
        # the run itself worked; the 0.5B model just did not settle on an answer in time
        print("demo: the embedded 0.5B model used all its steps without a final answer; the whole path "
              "(gateway, llama.cpp, tools) ran. Try `bash scripts/demo.sh --scripted` for the scripted "
              "model, or a real model with ANTHROPIC_AUTH_TOKEN set.", file=sys.stderr)
