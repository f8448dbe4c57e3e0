import java.io.File;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.hdfs.MiniDFSCluster;

/** A real single-node HDFS (Apache Hadoop's MiniDFSCluster: one NameNode, one DataNode, WebHDFS on)
 *  on 127.0.0.1 for rmqctl's tests. Args: BASEDIR. Prints "READY <rpc port> <http port>" once up and
 *  stops when its stdin closes (the test ended, or was killed). */
public class HdfsMain {
  public static void main(String[] args) throws Exception {
    Configuration conf = new Configuration();
    conf.set(MiniDFSCluster.HDFS_MINIDFS_BASEDIR, new File(args[0]).getAbsolutePath());
    conf.setBoolean("dfs.permissions.enabled", false);
    conf.setBoolean("dfs.webhdfs.enabled", true);
    conf.set("dfs.namenode.http-address", "127.0.0.1:0");
    conf.set("dfs.datanode.address", "127.0.0.1:0");
    conf.set("dfs.datanode.http.address", "127.0.0.1:0");
    conf.set("dfs.datanode.ipc.address", "127.0.0.1:0");
    conf.setInt("dfs.replication", 1);
    MiniDFSCluster cluster = new MiniDFSCluster.Builder(conf).numDataNodes(1).format(true).build();
    cluster.waitActive();
    int rpc = cluster.getNameNodePort();
    int http = cluster.getNameNode().getHttpAddress().getPort();
    System.out.println("READY " + rpc + " " + http);
    System.out.flush();
    while (System.in.read() != -1) { }
    cluster.shutdown(true);
    System.exit(0);
  }
}
