import sys

from agent_code.cli import main
from agent_code.demo import demo_argv, local_demo_argv

if __name__ == "__main__":
    args = sys.argv[1:]
    if "--scripted" in args:
        args.remove("--scripted")
        main(demo_argv(*args))
    else:
        main(local_demo_argv(*args))
