"""The agents: talking to kagent's agents over A2A (the client), and replaying a conversation's later turns on
them (the what-if's and the experiment's operations, and the replay engine they hand it to, `replay/`).

May import the branches, the operations, the frame and kagent's data; never a door.
"""
