import com.marcnuri.helm.Helm;
import com.marcnuri.helm.LintResult;
import com.marcnuri.helm.TemplateCommand;
import java.nio.file.Path;
import java.nio.file.Paths;

/**
 * Lints a chart (strict) and renders it any number of times, in one JVM (started once per test file). Run as a
 * single-file source: java -cp CLASSPATH HelmRun.java CHART [RENDER...], each RENDER being
 * NAME|NAMESPACE|VALUES_FILE,VALUES_FILE|KEY=VALUE;KEY=VALUE (empty parts allowed). Prints sections:
 * "=== lint failed=BOOL" and its messages, then "=== render NAME" and the manifests of each.
 */
public class HelmRun {
  public static void main(String[] args) throws Exception {
    Path chart = Paths.get(args[0]);
    Helm helm = new Helm(chart);
    LintResult lint = helm.lint().strict().call();
    StringBuilder out = new StringBuilder();
    out.append("=== lint failed=").append(lint.isFailed()).append('\n');
    for (String m : lint.getMessages()) out.append(m).append('\n');
    for (int i = 1; i < args.length; i++) {
      String[] parts = args[i].split("\\|", -1);
      TemplateCommand t = helm.template().withName(parts[0]).withNamespace(parts[1]).withKubeVersion("1.31.0");
      if (parts.length > 2 && !parts[2].isEmpty()) for (String f : parts[2].split(",")) t = t.withValuesFile(Paths.get(f));
      if (parts.length > 3 && !parts[3].isEmpty())
        for (String kv : parts[3].split(";")) {
          int eq = kv.indexOf('=');
          t = t.set(kv.substring(0, eq), kv.substring(eq + 1));
        }
      out.append("=== render ").append(parts[0]).append('\n').append(t.call()).append('\n');
    }
    System.out.print(out);
  }
}
