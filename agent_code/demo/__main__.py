import sys

from agent_code.cli import main
from agent_code.demo import demo_argv

if __name__ == "__main__":
    main(demo_argv(*sys.argv[1:]))
