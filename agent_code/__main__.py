from agent_code.cli import main

if __name__ == "__main__":
    main()
